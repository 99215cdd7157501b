package state

import (
	"errors"
	"math"
	"math/rand"
	"strings"
	"testing"
)

// TestLargestIsExact: the affine shape measured from small states gives
// the exact size of the worst state of any counts: it is Encode's size,
// not a formula beside it.
func TestLargestIsExact(t *testing.T) {
	fp := testPrint()
	fp.Datasets = append(fp.Datasets, DatasetPrint{Name: "b<&>\u2028", Format: "jsonl", Files: 1, Tokenizer: "cl100k_base", Digest: "y"})
	s, err := measure(fp)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		owned  uint32
		points int
	}{{1, 1}, {7, 1}, {3, 5}} {
		b, err := Encode(fp, worstRank(len(fp.Datasets), c.owned, MaxMixLog, c.points, MaxQueued))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := Largest(fp, c.owned, c.points)
		if got != int64(len(b)) || s.cursors(c.owned)+s.log(c.points) != got {
			t.Fatalf("owned %d points %d: Largest %d, the worst state encodes to %d", c.owned, c.points, got, len(b))
		}
	}
}

// TestLargestBoundsRealStates: states of random values, counts and logs
// never encode (as a rank file, or as the sharded form's run part) past
// Largest of their counts.
func TestLargestBoundsRealStates(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	fp := testPrint()
	fp.Datasets = append(fp.Datasets, DatasetPrint{Name: "b", Format: "megatron", Digest: "z"})
	num := func() uint64 { return rng.Uint64() >> rng.Intn(64) }
	weights := func() []float64 {
		w := []float64{rng.Float64() * math.Pow(10, float64(rng.Intn(40)-20)), rng.ExpFloat64()}
		return w
	}
	for i := 0; i < 200; i++ {
		owned := uint32(1 + rng.Intn(20))
		points := 1 + rng.Intn(6)
		r := Rank{DPRank: uint32(rng.Intn(1000)), DPSize: 1000, Step: num(), Shards: map[ShardID]Shard{}}
		first := uint32(rng.Intn(1 << 20))
		for d := range fp.Datasets {
			for k := uint32(0); k < owned; k++ {
				r.Shards[ShardID{d, first + k}] = Shard{Lines: num(), Window: Cursor{num(), num(), num()}, Taken: num(), Base: num()}
			}
		}
		for e := rng.Intn(MaxMixLog + 1); e > 0; e-- {
			mc := MixChange{Step: num(), Weights: weights(), Runtime: rng.Intn(2) == 0}
			for p := rng.Intn(points + 1); p > 0; p-- {
				mc.Schedule = append(mc.Schedule, SchedulePoint{Step: num(), Weights: weights(), Linear: rng.Intn(2) == 0})
			}
			r.Mixture = append(r.Mixture, mc)
		}
		for q := rng.Intn(MaxQueued + 1); q > 0; q-- {
			r.Mixture = append(r.Mixture, MixChange{Step: num(), Weights: weights(), Runtime: true})
		}
		b, err := Encode(fp, r)
		if err != nil {
			t.Fatal(err)
		}
		sh, err := Split(fp, r)
		if err != nil {
			t.Fatal(err)
		}
		bound, _ := Largest(fp, owned, points)
		if int64(len(b)) > bound || int64(len(sh.Run)) > bound {
			t.Fatalf("a state of %d shards a dataset and schedules of up to %d points is %d bytes (run part %d), over Largest %d",
				owned, points, len(b), len(sh.Run), bound)
		}
	}
}

// TestCheckLargest: the configs of issue 23 whose states outgrew what the
// daemon takes back are refused by name; ordinary ones pass.
func TestCheckLargest(t *testing.T) {
	fp := testPrint()
	fp.LogicalShards = 1 << 20
	err := CheckLargest(fp, 0, 1, 0)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "dp_rank 0 of dp_size 1 owns 1048576 of logical_shards 1048576") ||
		!strings.Contains(err.Error(), "raise dp_size or lower logical_shards") {
		t.Fatalf("a rank owning 2^20 shards: %v", err)
	}
	if err := CheckLargest(fp, 5, 1024, 0); err != nil {
		t.Fatalf("a rank owning 1024 of 2^20 shards: %v", err)
	}
	fp.LogicalShards = 1024
	fp.Datasets = append(fp.Datasets, DatasetPrint{Name: "b", Format: "megatron", Digest: "z"})
	err = CheckLargest(fp, 0, 1, 90000)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "a schedule of 90000 points over 2 datasets") ||
		!strings.Contains(err.Error(), "give the schedule fewer points") {
		t.Fatalf("a 90,000-point schedule: %v", err)
	}
	if err := CheckLargest(fp, 0, 1, 1000); err != nil {
		t.Fatalf("a 1,000-point schedule over 2 datasets: %v", err)
	}
	// What passes fits: the largest state of a passing geometry is within MaxBytes.
	if l, _ := Largest(fp, 1024, 1000); l > MaxBytes {
		t.Fatalf("Largest %d passes the check but exceeds MaxBytes", l)
	}
}

// TestShardCursorBytes: MaxShardCursors counts a cursor as Encode writes
// it at its longest.
func TestShardCursorBytes(t *testing.T) {
	s, err := measure(Fingerprint{Datasets: []DatasetPrint{{Name: "a"}}})
	if err != nil || s.perShard != shardCursorBytes {
		t.Fatalf("a shard cursor at its longest is %d bytes, shardCursorBytes says %d (%v)", s.perShard, shardCursorBytes, err)
	}
}
