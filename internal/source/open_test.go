package source

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/files"
)

// megatronCorpus writes three Megatron pairs (one of them with no sequences)
// and a stray file into dir, and returns the units in path order.
func megatronCorpus(t *testing.T, dir string) [][]int32 {
	t.Helper()
	writeMegatron(t, filepath.Join(dir, "b"), dtInt32, [][]float64{{10, 11}, {12}})
	writeMegatron(t, filepath.Join(dir, "a"), dtUint16, [][]float64{{1, 2, 3}, {}, {4}})
	writeMegatron(t, filepath.Join(dir, "a0"), dtUint8, nil)
	writeFile(t, filepath.Join(dir, "README.txt"), []byte("not data"))
	return [][]int32{{1, 2, 3}, {}, {4}, {10, 11}, {12}}
}

func TestOpenMegatronPaths(t *testing.T) {
	dir := t.TempDir()
	want := megatronCorpus(t, dir)
	for _, tc := range []struct {
		name, path string
		want       [][]int32
	}{
		{"directory", dir, want},
		{"glob of idx", filepath.Join(dir, "*.idx"), want},
		{"glob of both", filepath.Join(dir, "*"), want},
		{"prefix", filepath.Join(dir, "b"), want[3:]},
		{"bin path", filepath.Join(dir, "b.bin"), want[3:]},
		{"idx path", filepath.Join(dir, "a.idx"), want[:3]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := mustOpen(t, Spec{Name: "m", Path: tc.path, Format: files.Megatron})
			checkUnits(t, src, tc.want)
		})
	}
	src := mustOpen(t, Spec{Name: "m", Path: dir, Format: files.Megatron})
	var names []string
	for _, f := range src.Files() {
		info, err := os.Stat(f.Path)
		if err != nil || info.Size() != f.Size {
			t.Errorf("Files() has %s of %d bytes; stat says %v, %v", f.Path, f.Size, info, err)
		}
		names = append(names, filepath.Base(f.Path))
	}
	if wantNames := []string{"a.bin", "a.idx", "a0.bin", "a0.idx", "b.bin", "b.idx"}; !slices.Equal(names, wantNames) {
		t.Errorf("Files() = %v, want %v", names, wantNames)
	}
}

func TestOpenTokenPaths(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "2.bin"), encodeTokens(dtUint16, []float64{7, 0, 8}))
	writeFile(t, filepath.Join(dir, "1.bin"), llmcFile(dtUint16, 4, []float64{1, 0, 2, 0}))
	writeFile(t, filepath.Join(dir, "notes.txt"), []byte("x"))
	spec := Spec{Name: "flat", Format: files.Tokens, BlockTokens: 2}
	for _, tc := range []struct {
		name, path string
		want       [][]int32
	}{
		{"directory", dir, [][]int32{{1, 0}, {2, 0}, {7, 0}, {8}}},
		{"glob", filepath.Join(dir, "[12].bin"), [][]int32{{1, 0}, {2, 0}, {7, 0}, {8}}},
		{"file", filepath.Join(dir, "2.bin"), [][]int32{{7, 0}, {8}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec.Path = tc.path
			checkUnits(t, mustOpen(t, spec), tc.want)
		})
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	writeMegatron(t, filepath.Join(dir, "empty"), dtUint16, [][]float64{{}, {}})
	writeFile(t, filepath.Join(dir, "lonely", "x.idx"), newMegatronIndex(dtUint16, nil).encode())
	missing := filepath.Join(dir, "nope")
	for _, tc := range []struct {
		name      string
		spec      Spec
		fragments []string
	}{
		{"unknown format", Spec{Path: dir, Format: "parquet"}, []string{`format "parquet"`, `"arrow"`, `"megatron"`, `"tokens"`}},
		{"missing megatron path", Spec{Path: missing, Format: files.Megatron},
			[]string{`path "` + missing + `": no megatron`, "files found"}},
		{"missing tokens path", Spec{Path: missing, Format: files.Tokens},
			[]string{`path "` + missing + `": no tokens (.bin) files found`}},
		{"glob matching nothing", Spec{Path: filepath.Join(dir, "*.arrow"), Format: files.Tokens},
			[]string{"no tokens (.bin) files found"}},
		{"bad glob", Spec{Path: filepath.Join(dir, "[x"), Format: files.Tokens}, []string{"syntax error in pattern"}},
		{"empty megatron dataset", Spec{Path: filepath.Join(dir, "empty"), Format: files.Megatron},
			[]string{"empty dataset", "empty.bin"}},
		{"idx without bin", Spec{Path: filepath.Join(dir, "lonely"), Format: files.Megatron},
			[]string{filepath.Join(dir, "lonely", "x.bin"), "missing"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.Name = "ds"
			_, err := Open(tc.spec)
			checkInvalid(t, err, append(tc.fragments, `dataset "ds"`)...)
		})
	}
	_, err := Open(Spec{Name: "ds", Path: missing, Format: files.Tokens})
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("missing path: %v does not wrap ErrInvalid", err)
	}
}

func TestConcurrentReadsAndClose(t *testing.T) {
	dir := t.TempDir()
	want := megatronCorpus(t, dir)
	src, err := Open(Spec{Name: "m", Path: dir, Format: files.Megatron})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				for u, w := range want {
					got := make([]int32, len(w))
					if err := src.Read(uint64(u), 0, got); err != nil || !slices.Equal(got, w) {
						t.Errorf("Read(%d) = %v, %v", u, got, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	if err := src.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
