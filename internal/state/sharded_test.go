package state

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestShardedReshards: the split states of every rank of a world, pooled by
// shard as DCP pools them, restore onto worlds of other sizes: each new rank
// gets exactly its shards' cursors, the step and the mixture log, and every
// shard goes to one new rank.
func TestShardedReshards(t *testing.T) {
	fp := testPrint()
	pool := map[ShardID]Shard{}
	var runs [][]byte
	for _, st := range world(2) {
		st.Mixture = []MixChange{{Step: 0, Weights: []float64{1}}, {Step: 5, Weights: []float64{2}}}
		sp, err := Split(fp, st)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, sp.Run)
		for id, s := range sp.Shards {
			pool[id] = s
		}
	}
	if string(runs[0]) != string(runs[1]) {
		t.Fatal("the run parts of two ranks of one world differ: DCP would keep only one")
	}
	for _, w := range []uint32{1, 2, 3, 4} {
		seen := map[ShardID]bool{}
		for r := uint32(0); r < w; r++ {
			// What a DCP load of rank r's template takes from the whole
			// world's checkpoint (and explain --from, from the folder).
			mine := Sharded{Run: runs[0], Shards: pool}.ForRank(r, w, fp.LogicalShards)
			got, err := mine.Restore(fp, r, w)
			if err != nil {
				t.Fatalf("world %d rank %d: %v", w, r, err)
			}
			// FromSize is the saved world's: a schedule restarts its counts
			// on a resume of another size.
			if got.Step != 7 || len(got.Mixture) != 2 || got.Mixture[1].Step != 5 || got.FromSize != 2 ||
				!reflect.DeepEqual(got.Shards, mine.Shards) {
				t.Fatalf("world %d rank %d restored %+v", w, r, got)
			}
			for id := range got.Shards {
				if seen[id] {
					t.Fatalf("world %d: %v restored twice", w, id)
				}
				seen[id] = true
			}
		}
		if len(seen) != int(fp.LogicalShards) {
			t.Fatalf("world %d restored %d of %d shards", w, len(seen), fp.LogicalShards)
		}
	}
}

// TestShardedRefuses: a state that lacks a shard the rank owns, holds one
// it does not own, comes from another corpus, or claims cursors without a
// run part is refused with an error that says which.
func TestShardedRefuses(t *testing.T) {
	fp := testPrint()
	sp, err := Split(fp, world(2)[0]) // shards 0 and 1
	if err != nil {
		t.Fatal(err)
	}
	other := testPrint()
	other.Seed = 4
	cases := map[string]struct {
		s    Sharded
		cur  Fingerprint
		r, w uint32
		want string
	}{
		"a shard missing":     {sp, fp, 0, 1, `lacks dataset "a" shard 2, which dp_rank 0 of 1 owns`},
		"another rank's":      {sp, fp, 1, 2, `holds dataset "a" shard 0, which dp_rank 1 of 2 does not own`},
		"another corpus":      {sp, other, 0, 2, "seed is 3 in the saved state, 4 now"},
		"cursors without run": {Sharded{Shards: sp.Shards}, fp, 0, 2, "no run part"},
		"not a state":         {Sharded{Run: []byte("{"), Shards: sp.Shards}, fp, 0, 2, "not a dataloaderd state"},
		"outside the config":  {Sharded{Run: sp.Run, Shards: map[ShardID]Shard{{0, 9}: {}}}, fp, 0, 2, "outside 1 datasets of 4 shards"},
	}
	for name, c := range cases {
		if _, err := c.s.Restore(c.cur, c.r, c.w); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want ErrMismatch saying %q", name, err, c.want)
		}
	}
	// The state before the first batch: no run part, zero cursors.
	zero := Sharded{Shards: map[ShardID]Shard{{0, 0}: {}, {0, 1}: {}}}
	if got, err := zero.Restore(fp, 0, 2); err != nil || got.Step != 0 || len(got.Shards) != 2 {
		t.Fatalf("the initial state: %+v %v", got, err)
	}
	if sp.Key() == zero.Key() || sp.Key() != (Sharded{Run: sp.Run, Shards: sp.Shards}).Key() {
		t.Fatal("Key does not tell states apart, or tells equal ones apart")
	}
}

// TestShardedSaved: the run part tells the fingerprint and dp_size of the
// world that saved it; none before the first batch; a run part that is not
// a state is refused.
func TestShardedSaved(t *testing.T) {
	fp := testPrint()
	sp, err := Split(fp, world(3)[1])
	if err != nil {
		t.Fatal(err)
	}
	got, size, ok, err := sp.Saved()
	if err != nil || !ok || size != 3 || !reflect.DeepEqual(got, fp) {
		t.Fatalf("Saved: %+v, %d, %v, %v", got, size, ok, err)
	}
	if _, _, ok, err := Initial(1, 0, 1, 4).Saved(); ok || err != nil {
		t.Fatalf("the state before the first batch: %v, %v", ok, err)
	}
	for _, bad := range []string{"not json", `{"version": 9}`} {
		if _, _, _, err := (Sharded{Run: []byte(bad)}).Saved(); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "the run part of the state") {
			t.Errorf("run part %q: %v", bad, err)
		}
	}
}
