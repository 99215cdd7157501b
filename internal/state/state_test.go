package state

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func testPrint() Fingerprint {
	return Fingerprint{SeqLen: 8, LogicalShards: 4, Seed: 3, EOS: 0, BOS: -1, ShuffleWindow: 8,
		Datasets: []DatasetPrint{{Name: "a", Format: "megatron", Files: 2, Bytes: 100, Units: 10, Digest: "x"}}}
}

// world returns the states of a world of w ranks over 4 shards of one dataset.
func world(w uint32) []Rank {
	var out []Rank
	for r := uint32(0); r < w; r++ {
		st := Rank{DPRank: r, DPSize: w, Step: 7, Shards: map[ShardID]Shard{}}
		lo, hi := Owned(r, w, 4)
		for k := lo; k < hi; k++ {
			st.Shards[ShardID{0, k}] = Shard{Lines: uint64(k) + 1, Window: Cursor{Epoch: 1, Pos: uint64(k), Offset: 3}, Taken: 2}
		}
		out = append(out, st)
	}
	return out
}

func TestOwnedCoversEveryShardOnce(t *testing.T) {
	for s := uint32(1); s <= 40; s++ {
		for w := uint32(1); w <= s; w++ {
			next := uint32(0)
			for r := uint32(0); r < w; r++ {
				lo, hi := Owned(r, w, s)
				if lo != next || hi <= lo {
					t.Fatalf("shards %d world %d rank %d owns [%d,%d), want to start at %d and be non-empty", s, w, r, lo, hi, next)
				}
				next = hi
			}
			if next != s {
				t.Fatalf("shards %d world %d: ranks cover %d shards", s, w, next)
			}
		}
	}
}

func TestSaveLoadRescale(t *testing.T) {
	folder := t.TempDir()
	fp := testPrint()
	for _, st := range world(2) {
		path, n, err := Save(folder, fp, st)
		if err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(path); err != nil || fi.Size() != int64(n) {
			t.Fatalf("saved %s: %v size %d", path, err, n)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(folder, Dir, ".*tmp*")); len(left) > 0 {
		t.Fatalf("temp files left: %v", left)
	}
	blobs, names, err := ReadFolder(folder)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Merge(fp, names, blobs)
	if err != nil {
		t.Fatal(err)
	}
	if r.FromSize != 2 || r.Step != 7 || len(r.Shards) != 4 {
		t.Fatalf("merged: %+v", r)
	}
	for _, st := range world(2) {
		for id, s := range st.Shards {
			if !reflect.DeepEqual(r.Shards[id], s) {
				t.Fatalf("%v: %+v, saved %+v", id, r.Shards[id], s)
			}
		}
	}
}

func TestLoadErrors(t *testing.T) {
	fp := testPrint()
	save := func(t *testing.T, ranks []Rank, fp Fingerprint) string {
		folder := t.TempDir()
		for _, st := range ranks {
			if _, _, err := Save(folder, fp, st); err != nil {
				t.Fatal(err)
			}
		}
		return folder
	}
	other := fp
	other.SeqLen = 16
	other.Datasets = []DatasetPrint{{Name: "a", Format: "megatron", Files: 3, Bytes: 120, Units: 11, Digest: "y"}}
	cases := []struct {
		name   string
		folder func(t *testing.T) string
		want   string
	}{
		{"no folder", func(t *testing.T) string { return filepath.Join(t.TempDir(), "none") }, "no dataloader/ directory"},
		{"missing rank", func(t *testing.T) string { return save(t, world(2)[:1], fp) }, "lacks rank-1-of-2.json"},
		{"other corpus", func(t *testing.T) string { return save(t, world(2), other) }, "seq_len is 16 in the saved state, 8 now"},
		{"files differ", func(t *testing.T) string { return save(t, world(2), other) }, `dataset "a": files differ`},
		{"mixed worlds", func(t *testing.T) string {
			f := save(t, world(2), fp)
			if _, _, err := Save(f, fp, world(3)[0]); err != nil {
				t.Fatal(err)
			}
			return f
		}, "dp_size"},
		{"corrupt", func(t *testing.T) string {
			f := save(t, world(1), fp)
			os.WriteFile(filepath.Join(f, Dir, FileName(0, 1)), []byte("{nope"), 0o644)
			return f
		}, "not a dataloaderd state file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			blobs, names, err := ReadFolder(c.folder(t))
			if err == nil {
				_, err = Merge(fp, names, blobs)
			}
			if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want ErrMismatch containing %q", err, c.want)
			}
		})
	}
}

func TestStateStaysSmall(t *testing.T) {
	// 1024 shards with large cursors, on one rank: the file stays well under 64 KiB.
	st := Rank{DPRank: 0, DPSize: 1, Step: 1 << 40, Shards: map[ShardID]Shard{}}
	for k := uint32(0); k < 1024; k++ {
		st.Shards[ShardID{0, k}] = Shard{Lines: 1 << 30, Window: Cursor{Epoch: 3, Pos: 1 << 28, Offset: 4096}, Taken: 7}
	}
	b, err := Encode(testPrint(), st)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 64<<10 {
		t.Fatalf("state of 1024 shards is %d bytes", len(b))
	}
	_, back, err := Decode("x", b)
	if err != nil || !reflect.DeepEqual(back, st) {
		t.Fatalf("round trip: %v", err)
	}
}
