package source

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/files"
)

// TestMegatronWriterRoundTrip: what the writer commits opens as a Megatron
// dataset holding the same documents, in uint16 or int32 as the ids need;
// nothing is visible under the final names before Commit.
func TestMegatronWriterRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		maxID int32
		docs  [][]int32
		dt    dtype
	}{
		{50000, [][]int32{{1, 2, 3}, {}, {65535, 0}, {7}}, dtUint16},
		{200000, [][]int32{{1, 199999}, {3}}, dtInt32},
	} {
		prefix := filepath.Join(t.TempDir(), "sub", "out")
		w, err := NewMegatronWriter(prefix, tc.maxID)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range tc.docs {
			if err := w.Add(d); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := os.Stat(prefix + ".idx"); !os.IsNotExist(err) {
			t.Fatalf("%s.idx exists before Commit", prefix)
		}
		if err := w.Commit(); err != nil {
			t.Fatal(err)
		}
		src := mustOpen(t, Spec{Name: "w", Path: prefix, Format: files.Megatron})
		if m := src.(*concatSource).parts[0].(*megatronFile); m.dtype != tc.dt {
			t.Fatalf("written as %v, want %v", m.dtype, tc.dt)
		}
		if src.Units() != uint64(len(tc.docs)) {
			t.Fatalf("%d units, want %d", src.Units(), len(tc.docs))
		}
		for u, d := range tc.docs {
			got := make([]int32, len(d))
			if err := src.Read(uint64(u), 0, got); err != nil {
				t.Fatal(err)
			}
			for i := range d {
				if got[i] != d[i] {
					t.Fatalf("doc %d token %d: %d, want %d", u, i, got[i], d[i])
				}
			}
		}
		if left, _ := filepath.Glob(prefix + "*.tmp"); len(left) > 0 {
			t.Fatalf("temporary files left: %v", left)
		}
	}
}

func TestMegatronWriterErrorsAndAbort(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "out")
	w, err := NewMegatronWriter(prefix, 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add([]int32{1, 70000}); err == nil || !strings.Contains(err.Error(), "token 70000 does not fit uint16") {
		t.Fatalf("out-of-range token: %v", err)
	}
	if err := w.Add([]int32{-1}); err == nil {
		t.Fatal("a negative token was accepted")
	}
	w.Abort()
	if left, _ := filepath.Glob(prefix + "*"); len(left) > 0 {
		t.Fatalf("files left after Abort: %v", left)
	}
	if err := w.Commit(); err == nil {
		t.Fatal("Commit after Abort succeeded")
	}
}
