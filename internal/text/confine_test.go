package text

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/source"
)

// TestOpenConfined: a text dataset opens its files through Spec.Roots: a
// directory entry linked out of the roots is refused (as outside, not as
// bad input), one linked inside is read.
func TestOpenConfined(t *testing.T) {
	base := t.TempDir()
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	data := jsonlLines("text", []string{"a b", "c"})
	writeFile(t, filepath.Join(root, "real", "1.jsonl.gz"), gzipBytes(t, data))
	writeFile(t, filepath.Join(outside, "2.jsonl.zst"), zstdBytes(t, data))
	writeFile(t, filepath.Join(root, "in", "x"), nil)
	for target, link := range map[string]string{
		filepath.Join(root, "real", "1.jsonl.gz"): filepath.Join(root, "in", "1.jsonl.gz"),
		filepath.Join(outside, "2.jsonl.zst"):     filepath.Join(root, "out", "2.jsonl.zst"),
	} {
		os.MkdirAll(filepath.Dir(link), 0o755)
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	roots, err := files.NewRoots([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(Spec{Name: "t", Path: filepath.Join(root, "out"), Format: files.JSONL, Roots: roots})
	if !errors.Is(err, files.ErrOutsideRoots) || errors.Is(err, source.ErrInvalid) {
		t.Errorf("a file linked out: %v, want an outside error only", err)
	}
	ds := mustOpen(t, Spec{Name: "t", Path: filepath.Join(root, "in"), Format: files.JSONL, Roots: roots})
	checkDataset(t, ds, []string{"a b", "c"})
}
