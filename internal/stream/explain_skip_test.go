package stream

import (
	"context"
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/state"
)

// skipEach is SkipTo batch by batch, the way a session's skip goes.
func skipEach(t *testing.T, r *Rank, to uint64) {
	t.Helper()
	for r.Step() < to {
		p, err := r.SkipBatch(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if p.Lines == 0 {
			return
		}
	}
}

// TestSkipToCountsExactly holds the counting skip (SkipTo) to the skip
// batch by batch: from the start and from a state rescaled from 2 ranks to
// 3, over many epochs of small shards, endless or bounded (skips that end
// shards, datasets and the rank: the count gives way to the batches),
// under shuffle windows, BOS framing, schedules and a flat token file,
// both leave the rank in the same state and it makes the same batches
// after.
func TestSkipToCountsExactly(t *testing.T) {
	for seed := int64(1); seed <= 40; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			ds, _ := testCorpus(t, rng)
			cfg := randomConfig(rng, ds)
			cfg.Epochs = uint32(rng.Intn(3)) * uint32(1+rng.Intn(30)) // 0: endless
			if rng.Intn(3) == 0 {
				cfg.Schedule = []state.SchedulePoint{
					{Step: 0, Weights: []float64{1, 0, 2}},
					{Step: uint64(5 + rng.Intn(50)), Weights: []float64{3, 1, 0}, Linear: rng.Intn(2) == 0},
				}
			}
			c, err := OpenCorpus(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var from *state.Restored
			w := uint32(2)
			if rng.Intn(2) == 0 {
				var states []state.Rank
				for r := uint32(0); r < 2; r++ {
					rank, err := NewRank(c, r, 2, nil)
					if err != nil {
						t.Fatal(err)
					}
					skipEach(t, rank, uint64(1+rng.Intn(30)))
					states = append(states, rank.State())
				}
				from, w = saveWorld(t, c.Fingerprint(), states), 3
			}
			for r := uint32(0); r < w; r++ {
				fast, err := NewRank(c, r, w, from)
				if err != nil {
					t.Fatal(err)
				}
				if !fast.countable() {
					t.Fatal("an endless stream of pre-tokenized data is not skipped by counting")
				}
				slow, err := NewRank(c, r, w, from)
				if err != nil {
					t.Fatal(err)
				}
				to := fast.Step()
				for _, by := range []uint64{1, uint64(1 + rng.Intn(7)), uint64(100 + rng.Intn(3000)), uint64(rng.Intn(3000))} {
					to += by
					if err := fast.SkipTo(context.Background(), to); err != nil {
						t.Fatal(err)
					}
					skipEach(t, slow, to)
					if got, want := fast.State(), slow.State(); !reflect.DeepEqual(got, want) {
						t.Fatalf("rank %d of %d at step %d: counted to\n%+v\nskipped to\n%+v", r, w, to, got, want)
					}
					for _, d := range fast.datasets {
						for _, s := range d.active {
							if fast.shardDone(s) {
								t.Fatalf("rank %d of %d at step %d: dataset %d shard %d ended, but is still served", r, w, to, d.index, s.index)
							}
						}
					}
					sameBatches(t, fast, slow, 2)
					to += 2
				}
			}
		})
	}
}

// sameBatches makes n batches on both ranks and fails where they differ.
func sameBatches(t *testing.T, a, b *Rank, n int) {
	t.Helper()
	cfg := a.corpus.cfg
	ba, bb := batchBuf(cfg), batchBuf(cfg)
	for range n {
		pa, err := a.NextBatch(ba)
		if err != nil {
			t.Fatal(err)
		}
		pb, err := b.NextBatch(bb)
		if err != nil {
			t.Fatal(err)
		}
		if pa.Lines != pb.Lines || !slices.Equal(ba, bb) {
			t.Fatalf("step %d: the batches differ (%d and %d lines)", a.Step(), pa.Lines, pb.Lines)
		}
	}
}

// TestSkipToStopsAtTheEnd: a bounded run skipped past its end stops
// there; a cancelled skip returns the context's error.
func TestSkipToStopsAtTheEnd(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	ds, _ := testCorpus(t, rng)
	cfg := randomConfig(rng, ds)
	c, err := OpenCorpus(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rank, err := NewRank(c, 0, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := rank.SkipTo(context.Background(), 1<<40); err != nil {
		t.Fatal(err)
	}
	p, err := rank.NextBatch(batchBuf(cfg))
	if err != nil || p.Lines != 0 {
		t.Fatalf("after a skip past the end: %d lines, %v", p.Lines, err)
	}
	cfg.Epochs = 0
	c2, err := OpenCorpus(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	endless, err := NewRank(c2, 0, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := endless.SkipTo(ctx, 1<<40); err != context.Canceled {
		t.Fatalf("a cancelled skip: %v", err)
	}
}

// TestSkipToEveryStep counts a bounded run on 2 ranks to every one of its
// steps, from the start, and holds each to the rank skipped batch by batch
// to that step: so the count meets every way a shard's stream ends (in a
// window, with a window's last line, with the count's last line).
func TestSkipToEveryStep(t *testing.T) {
	for seed := int64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			ds, _ := testCorpus(t, rng)
			cfg := randomConfig(rng, ds)
			cfg.Epochs = uint32(1 + rng.Intn(2))
			c, err := OpenCorpus(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for r := uint32(0); r < 2; r++ {
				slow, err := NewRank(c, r, 2, nil)
				if err != nil {
					t.Fatal(err)
				}
				for to := uint64(1); ; to++ {
					skipEach(t, slow, to)
					fast, err := NewRank(c, r, 2, nil)
					if err != nil {
						t.Fatal(err)
					}
					if err := fast.SkipTo(context.Background(), to); err != nil {
						t.Fatal(err)
					}
					if got, want := fast.State(), slow.State(); !reflect.DeepEqual(got, want) {
						t.Fatalf("rank %d at step %d: counted to\n%+v\nskipped to\n%+v", r, to, got, want)
					}
					sameBatches(t, fast, slow, 1)
					if slow.Step() < to {
						break // the rank ended
					}
					// sameBatches moved both a step on: start the next again.
					slow, err = NewRank(c, r, 2, nil)
					if err != nil {
						t.Fatal(err)
					}
					skipEach(t, slow, to)
				}
			}
		})
	}
}
