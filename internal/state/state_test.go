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
		path, n, err := Save(dirFolder(folder), fp, st)
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
	blobs, names, err := ReadFolder(dirFolder(folder))
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
			if _, _, err := Save(dirFolder(folder), fp, st); err != nil {
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
			if _, _, err := Save(dirFolder(f), fp, world(3)[0]); err != nil {
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
			blobs, names, err := ReadFolder(dirFolder(c.folder(t)))
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

func TestMixtureAndBasesRoundTrip(t *testing.T) {
	fp := testPrint()
	st := world(1)[0]
	for id, s := range st.Shards {
		s.Base = s.Lines - 1
		st.Shards[id] = s
	}
	st.Mixture = []MixChange{{Step: 0, Weights: []float64{1}}, {Step: 5, Weights: []float64{2}}}
	b, err := Encode(fp, st)
	if err != nil {
		t.Fatal(err)
	}
	_, back, err := Decode("x", b)
	if err != nil || !reflect.DeepEqual(back, st) {
		t.Fatalf("round trip: %v\n got %+v\nwant %+v", err, back, st)
	}
	r, err := Merge(fp, []string{"x"}, [][]byte{b})
	if err != nil || !reflect.DeepEqual(r.Mixture, st.Mixture) || r.MixturesDiffer {
		t.Fatalf("merge: %v, mixture %+v differ %v", err, r.Mixture, r.MixturesDiffer)
	}
}

func TestVersion1FilesStillRead(t *testing.T) {
	v1 := `{"version":1,"dp_rank":0,"dp_size":1,"step":7,"fingerprint":{"seq_len":8,"logical_shards":4,"seed":3,"eos_id":0,"bos_id":-1,"shuffle_window":8,"datasets":[{"name":"a","format":"megatron","files":2,"bytes":100,"units":10,"digest":"x"}]},
	"shards":[{"dataset":0,"first":0,"lines":[1,2,3,4],"epoch":[1,1,1,1],"pos":[0,1,2,3],"offset":[3,3,3,3],"taken":[2,2,2,2]}]}`
	_, r, err := Decode("v1", []byte(v1))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Mixture) != 0 || r.Shards[ShardID{0, 3}] != (Shard{Lines: 4, Window: Cursor{1, 3, 3}, Taken: 2}) {
		t.Fatalf("v1 decoded as %+v", r)
	}
}

func TestMixtureErrors(t *testing.T) {
	fp := testPrint()
	for _, c := range []struct {
		name string
		edit func(*Rank)
		want string
	}{
		{"base past lines", func(r *Rank) {
			s := r.Shards[ShardID{0, 1}]
			s.Base = s.Lines + 1
			r.Shards[ShardID{0, 1}] = s
		}, "dataset 0 shard 1: base 3 is past its 2 lines"},
		{"weights for other datasets", func(r *Rank) {
			r.Mixture = []MixChange{{Weights: []float64{1, 2}}}
		}, "mixture[0] (step 0) weights [1 2]: 2 weights for 1 datasets"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := world(1)[0]
			c.edit(&st)
			b, err := Encode(fp, st)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := Decode("x", b); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
}

func TestSameWeights(t *testing.T) {
	for _, c := range []struct {
		a, b []float64
		same bool
	}{
		{[]float64{3, 1}, []float64{6, 2}, true},
		{[]float64{3, 1}, []float64{1, 1}, false},
		{[]float64{1, 0}, []float64{2, 0}, true},
		{[]float64{1}, []float64{1, 1}, false},
	} {
		if got := SameWeights(c.a, c.b); got != c.same {
			t.Errorf("SameWeights(%v, %v) = %v", c.a, c.b, got)
		}
	}
}
