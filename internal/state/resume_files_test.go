package state_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/state"
)

// growingFolder is the daemon's Folder, whose rank file `grows` becomes a
// 200 MiB file after it was listed, just before it is read.
type growingFolder struct {
	*files.Folder
	t     *testing.T
	grows string
}

func (g growingFolder) ReadFile(name string, limit int64) ([]byte, error) {
	if filepath.Base(name) == g.grows {
		if err := os.Truncate(filepath.Join(g.Path(), name), 200<<20); err != nil {
			g.t.Fatal(err)
		}
	}
	return g.Folder.ReadFile(name, limit)
}

// TestReadOwnedBoundsOpenedFiles: through the daemon's own Folder, a rank
// file that is a symlink to a 200 MiB (sparse) file, or that grows to 200
// MiB after the folder was listed, is refused by name with its size and
// the bound, with under 16 MiB allocated. Before, the bound was checked on
// the listing's lstat (a link's own size; the size at listing) and the
// file read up to 256 MiB, io.ReadAll allocating some 410 MiB for it, and
// refused only after that (issue 23).
func TestReadOwnedBoundsOpenedFiles(t *testing.T) {
	fp := state.Fingerprint{SeqLen: 8, LogicalShards: 8, Seed: 3, BOS: -1, ShuffleWindow: 8,
		Datasets: []state.DatasetPrint{{Name: "a", Format: "megatron", Files: 2, Bytes: 100, Units: 10, Digest: "x"}}}
	roots, err := files.NewRoots(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, how := range []string{"symlinked", "grown"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			folder, err := roots.Folder("resume_from", dir)
			if err != nil {
				t.Fatal(err)
			}
			for r := uint32(0); r < 2; r++ {
				st := state.Rank{DPRank: r, DPSize: 2, Step: 3, Shards: map[state.ShardID]state.Shard{},
					Mixture: []state.MixChange{{Step: 0, Weights: []float64{1}}}}
				lo, hi := state.Owned(r, 2, fp.LogicalShards)
				for k := lo; k < hi; k++ {
					st.Shards[state.ShardID{Dataset: 0, Shard: k}] = state.Shard{Lines: 10}
				}
				if _, _, err := state.Save(folder, fp, st); err != nil {
					t.Fatal(err)
				}
			}
			path := filepath.Join(dir, state.Dir, "rank-1-of-2.json")
			var f state.Folder = folder
			if how == "symlinked" {
				big := filepath.Join(t.TempDir(), "big")
				if err := os.WriteFile(big, nil, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Truncate(big, 200<<20); err != nil {
					t.Fatal(err)
				}
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(big, path); err != nil {
					t.Fatal(err)
				}
			} else {
				f = growingFolder{Folder: folder, t: t, grows: "rank-1-of-2.json"}
			}
			bound, err := state.FileBound(fp, 4)
			if err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err = state.ReadOwned(f, fp, 1, 2)
			runtime.ReadMemStats(&after)
			if n := after.TotalAlloc - before.TotalAlloc; n > 16<<20 {
				t.Errorf("refusing a 200 MiB rank file allocated %d bytes", n)
			}
			if !errors.Is(err, state.ErrTooLarge) || !strings.Contains(err.Error(), path) ||
				!strings.Contains(err.Error(), fmt.Sprintf("is %d bytes, more than the %d bytes", 200<<20, bound)) {
				t.Fatalf("a %s 200 MiB rank file: %v", how, err)
			}
		})
	}
}
