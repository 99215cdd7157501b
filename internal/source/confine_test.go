package source

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/files"
)

// TestOpenConfined: a dataset opens its files through Spec.Roots: a glob
// match, a directory entry or a Megatron .bin linked out of the roots is
// refused (as outside, not as bad input); links inside are followed.
func TestOpenConfined(t *testing.T) {
	base := t.TempDir()
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	tokens := encodeTokens(dtUint16, []float64{1, 0, 2, 0})
	writeFile(t, filepath.Join(root, "real", "a.bin"), tokens)
	writeFile(t, filepath.Join(outside, "b.bin"), tokens)
	writeMegatron(t, filepath.Join(root, "real", "m"), dtInt32, [][]float64{{1, 2}, {3}})
	writeMegatron(t, filepath.Join(outside, "m"), dtInt32, [][]float64{{1, 2}, {3}})
	for link, target := range map[string]string{
		"in/a.bin":   filepath.Join(root, "real", "a.bin"),
		"out/a.bin":  filepath.Join(root, "real", "a.bin"),
		"out/b.bin":  filepath.Join(outside, "b.bin"),
		"pair/m.idx": filepath.Join(root, "real", "m.idx"),
		"pair/m.bin": filepath.Join(outside, "m.bin"),
	} {
		link = filepath.Join(root, link)
		os.MkdirAll(filepath.Dir(link), 0o755)
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	roots, err := files.NewRoots([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range []Spec{
		{Path: filepath.Join(root, "out", "*.bin"), Format: files.Tokens},
		{Path: filepath.Join(root, "out"), Format: files.Tokens},
		{Path: filepath.Join(root, "pair", "m"), Format: files.Megatron},
		{Path: filepath.Join(outside, "m"), Format: files.Megatron},
	} {
		spec.Name, spec.Roots = "ds", roots
		if _, err := Open(spec); !errors.Is(err, files.ErrOutsideRoots) || errors.Is(err, ErrInvalid) {
			t.Errorf("Open(%s): %v, want an outside error only", spec.Path, err)
		}
	}
	checkUnits(t, mustOpen(t, Spec{Name: "ds", Path: filepath.Join(root, "in"), Format: files.Tokens, EOS: 0, Roots: roots}), [][]int32{{1, 0, 2, 0}})
	checkUnits(t, mustOpen(t, Spec{Name: "ds", Path: filepath.Join(root, "real", "m.bin"), Format: files.Megatron, Roots: roots}), [][]int32{{1, 2}, {3}})
}
