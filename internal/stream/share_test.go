package stream

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/state"
)

// randomSchedule is n points over three datasets, some of them ramps, a
// dataset at 0 now and then.
func randomSchedule(rng *rand.Rand, n int) []state.SchedulePoint {
	var pts []state.SchedulePoint
	step := uint64(rng.Intn(4))
	for i := 0; i < n; i++ {
		w := []float64{float64(rng.Intn(4)), rng.Float64() * 3, float64(1 + rng.Intn(5))}
		pts = append(pts, state.SchedulePoint{Step: step, Weights: w, Linear: i > 0 && rng.Intn(2) == 0})
		step += uint64(1 + rng.Intn(12))
	}
	return pts
}

// TestShareSumIsAFunctionOfItsSteps: a schedule's share integral reached in
// one go (as a resumed rank reaches its step) equals, bit for bit, the one
// reached step by step (as the rank that never stopped reaches it) and in
// random strides; its weights are the schedule's at every step; and it is
// the schedule integrated, up to rounding.
func TestShareSumIsAFunctionOfItsSteps(t *testing.T) {
	ctx := context.Background()
	for seed := int64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewSource(seed))
		pts := randomSchedule(rng, 1+rng.Intn(8))
		base := uint64(rng.Intn(20))
		end := pts[len(pts)-1].Step + 20
		live, strided := newShareSum(pts, base), newShareSum(pts, base)
		naive := make([]float64, 3)
		for s := base + 1; s <= end; s++ {
			if err := live.advance(ctx, s); err != nil {
				t.Fatal(err)
			}
			w := state.ScheduleWeights(pts, s, nil)
			var sum float64
			for _, x := range w {
				sum += x
			}
			for d := range w {
				naive[d] += w[d] / sum
				if live.weights[d] != w[d] {
					t.Fatalf("seed %d step %d: weights %v, the schedule's %v", seed, s, live.weights, w)
				}
				if math.Abs(live.target[d]-naive[d]) > 1e-9*float64(s) {
					t.Fatalf("seed %d step %d: share %v, the schedule integrated %v", seed, s, live.target, naive)
				}
			}
			if rng.Intn(3) == 0 || s == end {
				if err := strided.advance(ctx, s); err != nil {
					t.Fatal(err)
				}
				resumed := newShareSum(pts, base)
				if err := resumed.advance(ctx, s); err != nil {
					t.Fatal(err)
				}
				for d := range naive {
					if resumed.target[d] != live.target[d] || strided.target[d] != live.target[d] {
						t.Fatalf("seed %d step %d: share %v in one go, %v in strides, %v step by step",
							seed, s, resumed.target, strided.target, live.target)
					}
				}
			}
		}
	}
}

// forgedAt is a state of rank 0 of 1 at step, under the corpus's schedule
// since step 0, as a forged or very long run's file gives it.
func forgedAt(t *testing.T, corpus *Corpus, step uint64) *state.Restored {
	t.Helper()
	rank, err := NewRank(corpus, 0, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	st := rank.State()
	st.Step = step
	return saveWorld(t, corpus.Fingerprint(), []state.Rank{st})
}

// scheduledCorpus opens the fixture's corpus under a schedule.
func scheduledCorpus(t *testing.T, pts []state.SchedulePoint) *Corpus {
	t.Helper()
	_, cfg := pipelineFixture(t, 0)
	cfg.Schedule = pts
	c, err := OpenCorpus(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestScheduleReplayBounded: a state at step 2^32 (under the 2^48 bound)
// under a 1,000-point schedule used to replay every step at open (463 ns
// each: 0.6 hours, a core pinned). Of constant points it now opens after
// summing no step one by one; of ramps it is refused before summing any,
// naming the bound; and a replay within the bound stops when its context
// ends.
func TestScheduleReplayBounded(t *testing.T) {
	const far = 1 << 32
	constant := make([]state.SchedulePoint, 1000)
	ramps := make([]state.SchedulePoint, 1000)
	for i := range constant {
		w := []float64{float64(1 + i%3), 1, float64(1 + i%5)}
		constant[i] = state.SchedulePoint{Step: uint64(i) * 1000, Weights: w}
		ramps[i] = state.SchedulePoint{Step: uint64(i) << 22, Weights: w, Linear: i > 0}
	}
	c := scheduledCorpus(t, constant)
	rank, err := NewRank(c, 0, 1, forgedAt(t, c, far))
	if err != nil {
		t.Fatal(err)
	}
	if rank.mix.share.perStep != 0 || rank.mix.share.at != far {
		t.Fatalf("resumed at step 2^32 under constant points: %d steps summed one by one, summed to step %d", rank.mix.share.perStep, rank.mix.share.at)
	}
	if w := constant[999].Weights; fmt.Sprint(rank.mix.weights) != fmt.Sprint(w) {
		t.Fatalf("weights after step 2^32: %v, want the last point's %v", rank.mix.weights, w)
	}
	if _, err := rank.NextBatch(batchBuf(c.cfg)); err != nil {
		t.Fatal(err)
	}

	rc := scheduledCorpus(t, ramps)
	_, err = NewRank(rc, 0, 1, forgedAt(t, rc, far))
	if !errors.Is(err, state.ErrMismatch) || !strings.Contains(err.Error(), fmt.Sprint(maxScheduleReplay)) {
		t.Fatalf("resumed at step 2^32 under ramps: %v, want a refusal naming the bound %d", err, maxScheduleReplay)
	}

	// Within the bound, a replay stops with its context: an open whose
	// client went, or a daemon stopping.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := newShareSum(ramps, 0)
	if err := s.advance(ctx, 1<<21); !errors.Is(err, context.Canceled) || s.perStep != replayCheck {
		t.Fatalf("a cancelled replay: %v after %d steps, want context.Canceled after %d", err, s.perStep, replayCheck)
	}
	if _, err := NewRankContext(ctx, rc, 0, 1, forgedAt(t, rc, 1<<21)); !errors.Is(err, context.Canceled) {
		t.Fatalf("NewRankContext under a cancelled context: %v", err)
	}
}

// TestSkipBatchStopsWithItsContext: a skip whose context ended stops before
// its next line with the context's error.
func TestSkipBatchStopsWithItsContext(t *testing.T) {
	corpus, _ := pipelineFixture(t, 0)
	rank, _ := NewRank(corpus, 0, 1, nil)
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := rank.SkipBatch(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := rank.SkipBatch(ctx); !errors.Is(err, context.Canceled) || rank.Step() != 1 {
		t.Fatalf("a skip under a cancelled context: %v at step %d", err, rank.Step())
	}
}
