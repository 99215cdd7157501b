package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// countingFolder is a dirFolder that records the files read whole, the
// limit each read was given, and the bytes read of each file by ReadFile
// (whole) and by ReadPrefix (prefix).
type countingFolder struct {
	dirFolder
	read          []string
	limits        map[string]int64
	whole, prefix map[string]int
}

func (c *countingFolder) ReadFile(name string, limit int64) ([]byte, error) {
	if c.limits == nil {
		c.limits, c.whole = map[string]int64{}, map[string]int{}
	}
	c.limits[filepath.Base(name)] = limit
	b, err := c.dirFolder.ReadFile(name, limit)
	if err == nil {
		c.read = append(c.read, filepath.Base(name))
	}
	c.whole[filepath.Base(name)] += len(b)
	return b, err
}

func (c *countingFolder) ReadPrefix(name string, n int64) ([]byte, error) {
	if c.prefix == nil {
		c.prefix = map[string]int{}
	}
	b, err := c.dirFolder.ReadPrefix(name, n)
	c.prefix[filepath.Base(name)] += len(b)
	return b, err
}

// saveWorld saves a world of w ranks over `shards` shards of one dataset,
// each cursor distinct, and returns the folder.
func saveWorld(t *testing.T, fp Fingerprint, w uint32) string {
	t.Helper()
	folder := t.TempDir()
	for r := uint32(0); r < w; r++ {
		st := Rank{DPRank: r, DPSize: w, Step: 9, Shards: map[ShardID]Shard{},
			Mixture: []MixChange{{Step: 0, Weights: []float64{1}}}}
		lo, hi := Owned(r, w, fp.LogicalShards)
		for k := lo; k < hi; k++ {
			st.Shards[ShardID{0, k}] = Shard{Lines: uint64(k) + 10, Window: Cursor{Epoch: 1, Pos: uint64(k), Offset: 1}, Taken: 1, Base: 2}
		}
		if _, _, err := Save(dirFolder(folder), fp, st); err != nil {
			t.Fatal(err)
		}
	}
	return folder
}

// TestReadOwnedReadsOnlyOverlapping: a rank resuming from a folder reads
// the files whose shards overlap its own, and no other. Before, each rank
// of an N-rank resume read all N files (issue 23).
func TestReadOwnedReadsOnlyOverlapping(t *testing.T) {
	fp := testPrint()
	fp.LogicalShards = 12
	folder := saveWorld(t, fp, 4) // ranks own shards 0-2, 3-5, 6-8, 9-11
	blobs, names, err := ReadFolder(dirFolder(folder))
	if err != nil {
		t.Fatal(err)
	}
	all, err := Merge(fp, names, blobs)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		r, w uint32
		want []string
	}{
		{0, 4, []string{"rank-0-of-4.json"}},
		{3, 4, []string{"rank-3-of-4.json"}},
		{1, 2, []string{"rank-2-of-4.json", "rank-3-of-4.json"}}, // shards 6-11
		{1, 3, []string{"rank-1-of-4.json", "rank-2-of-4.json"}}, // shards 4-7
		{0, 1, []string{"rank-0-of-4.json", "rank-1-of-4.json", "rank-2-of-4.json", "rank-3-of-4.json"}},
		{5, 12, []string{"rank-1-of-4.json"}}, // shard 5
	} {
		t.Run(fmt.Sprintf("rank %d of %d", c.r, c.w), func(t *testing.T) {
			f := &countingFolder{dirFolder: dirFolder(folder)}
			got, err := ReadOwned(f, fp, c.r, c.w)
			if err != nil {
				t.Fatal(err)
			}
			sort.Strings(f.read)
			if !reflect.DeepEqual(f.read, c.want) {
				t.Fatalf("read %v, want %v", f.read, c.want)
			}
			lo, hi := Owned(c.r, c.w, fp.LogicalShards)
			if len(got.Shards) != int(hi-lo) || got.Step != 9 || got.FromSize != 4 || len(got.Mixture) != 1 {
				t.Fatalf("restored %d shards, step %d, from %d, mixture %v", len(got.Shards), got.Step, got.FromSize, got.Mixture)
			}
			for k := lo; k < hi; k++ {
				id := ShardID{0, k}
				if got.Shards[id] != all.Shards[id] {
					t.Fatalf("%v: %+v, the whole world's merge has %+v", id, got.Shards[id], all.Shards[id])
				}
			}
		})
	}
}

// TestReadOwnedBoundsFiles: a rank file larger than the largest state its
// rank could have written is refused by name, with the bound, without
// being read; a rank that does not need it never looks at it. Before, any
// file under the 256 MiB cap was read whole and decoded (a 175 MiB one
// OOM-killed the daemon in a 1 GiB cgroup, issue 23).
func TestReadOwnedBoundsFiles(t *testing.T) {
	fp := testPrint()
	fp.LogicalShards = 8
	folder := saveWorld(t, fp, 2)
	big := filepath.Join(folder, Dir, "rank-1-of-2.json")
	bound, err := FileBound(fp, 4)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(big)
	// Whitespace JSON would parse: only its size is wrong.
	if err := os.WriteFile(big, append(b, make([]byte, bound)...), 0o644); err != nil {
		t.Fatal(err)
	}

	f := &countingFolder{dirFolder: dirFolder(folder)}
	if _, err := ReadOwned(f, fp, 0, 2); err != nil || len(f.read) != 1 {
		t.Fatalf("rank 0 of 2 needs rank 0's file only: read %v, %v", f.read, err)
	}
	f = &countingFolder{dirFolder: dirFolder(folder)}
	_, err = ReadOwned(f, fp, 1, 2)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), big) || !strings.Contains(err.Error(), fmt.Sprintf("more than the %d bytes", bound)) {
		t.Fatalf("an oversized rank file: %v", err)
	}
	if len(f.read) != 0 || f.limits["rank-1-of-2.json"] != bound {
		t.Fatalf("the oversized file was read (%v), or its read was given the limit %d, not the bound %d", f.read, f.limits["rank-1-of-2.json"], bound)
	}
}

// TestReadOwnedErrors: a world incomplete by name, or a file whose
// contents are another rank's than its name says, is refused by name.
func TestReadOwnedErrors(t *testing.T) {
	fp := testPrint()
	fp.LogicalShards = 8
	t.Run("missing rank", func(t *testing.T) {
		folder := saveWorld(t, fp, 4)
		os.Remove(filepath.Join(folder, Dir, "rank-2-of-4.json"))
		f := &countingFolder{dirFolder: dirFolder(folder)}
		_, err := ReadOwned(f, fp, 0, 4)
		if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "lacks rank-2-of-4.json") || len(f.read) != 0 {
			t.Fatalf("a world without rank 2: %v, read %v", err, f.read)
		}
	})
	t.Run("renamed", func(t *testing.T) {
		folder := saveWorld(t, fp, 2)
		dir := filepath.Join(folder, Dir)
		a, b := filepath.Join(dir, "rank-0-of-2.json"), filepath.Join(dir, "rank-1-of-2.json")
		os.Rename(a, a+".x")
		os.Rename(b, a)
		os.Rename(a+".x", b)
		_, err := ReadOwned(dirFolder(folder), fp, 0, 1)
		if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "not the one its name says") {
			t.Fatalf("swapped rank files: %v", err)
		}
	})
	t.Run("no folder", func(t *testing.T) {
		_, err := ReadOwned(dirFolder(t.TempDir()), fp, 0, 1)
		if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "no dataloader/ directory") {
			t.Fatalf("no rank files: %v", err)
		}
	})
}

// TestStatesGivenInlineBounded: states given in a request (resume_states,
// a DCP state's run part) larger than any rank of the config could write
// are refused before they are decoded: decoding allocates per number first.
func TestStatesGivenInlineBounded(t *testing.T) {
	fp := testPrint()
	st := world(1)[0]
	b, err := Encode(fp, st)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := FileBound(fp, fp.LogicalShards)
	padded := append(append([]byte(nil), b...), make([]byte, int(all)-len(b))...)
	for i := range padded[len(b):] {
		padded[len(b)+i] = ' '
	}
	if _, err := Merge(fp, []string{"s"}, [][]byte{padded}); err != nil {
		t.Fatalf("a state at the bound: %v", err)
	}
	if _, err := Merge(fp, []string{"s"}, [][]byte{append(padded, ' ')}); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "s is") {
		t.Fatalf("a state past the bound: %v", err)
	}
	sh, err := Split(fp, st)
	if err != nil {
		t.Fatal(err)
	}
	one, _ := FileBound(fp, 1)
	sh.Run = append(sh.Run, make([]byte, int(one)-len(sh.Run)+1)...)
	if _, err := sh.Restore(fp, 0, 1); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "the run part") {
		t.Fatalf("a run part past the bound: %v", err)
	}
}
