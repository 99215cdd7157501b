package stream

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/state"
)

// TestSkipRangeThenRescale is issue 28's promise for a skip: a world of 2
// ranks skips the steps of a range (from the config key), saves after it
// and resumes on 3 ranks to the end: every token outside the range is
// served exactly once, every token inside it never; the batch after the
// range's first step - 1 is data step last + 1, equal to what a rank that
// skipped nothing makes at that step; the saved states and the merged
// one log the range.
func TestSkipRangeThenRescale(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			ds, all := testCorpus(t, rng)
			cfg := randomConfig(rng, ds)
			first := uint64(2 + rng.Intn(4))
			last := first + uint64(rng.Intn(5))
			cfg.SkipSteps = []state.SkipRange{{First: first, Last: last}}
			corpus, err := OpenCorpus(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer corpus.Close()
			plain := cfg
			plain.SkipSteps = nil
			ref, err := OpenCorpus(plain)
			if err != nil {
				t.Fatal(err)
			}
			defer ref.Close()
			if corpus.JobFingerprint() != ref.JobFingerprint() || !reflect.DeepEqual(corpus.Fingerprint(), ref.Fingerprint()) {
				t.Fatal("skip_steps entered the job's or the state's fingerprint")
			}
			skipped := map[int32]int{}
			served := map[int32]int{}
			buf := batchBuf(cfg)
			line := cfg.LineTokens()
			var states []state.Rank
			stop := last + uint64(1+rng.Intn(4))
			for r := uint32(0); r < 2; r++ {
				rank := skippingRank(t, corpus, r, 2)
				unskipped, _ := NewRank(ref, r, 2, nil)
				want := run(t, unskipped, cfg, int(stop))
				for i := uint64(first); i <= last && int(i) <= len(want); i++ {
					count(skipped, want[i-1])
				}
				for rank.Step() < stop {
					p, err := rank.NextBatch(buf)
					if err != nil {
						t.Fatal(err)
					}
					if p.Lines == 0 {
						break
					}
					step := rank.Step()
					if step >= first && step <= last {
						t.Fatalf("rank %d served step %d of the skipped range [%d, %d]", r, step, first, last)
					}
					if step == last+1 && p.Skipped != last-first+1 {
						t.Fatalf("rank %d: batch %d says %d batches skipped before it, want %d", r, step, p.Skipped, last-first+1)
					}
					if int(step) <= len(want) && !slices.Equal(buf[:p.Lines*line], want[step-1]) {
						t.Fatalf("rank %d: step %d differs from the step of a run that skipped nothing", r, step)
					}
					count(served, buf[:p.Lines*line])
				}
				st := rank.State()
				if !reflect.DeepEqual(st.Skips, cfg.SkipSteps) {
					t.Fatalf("rank %d state logs %v, want %v", r, st.Skips, cfg.SkipSteps)
				}
				states = append(states, st)
			}
			from := saveWorld(t, corpus.Fingerprint(), states)
			if !reflect.DeepEqual(from.Skips, cfg.SkipSteps) {
				t.Fatalf("merged state logs %v, want %v", from.Skips, cfg.SkipSteps)
			}
			for r := uint32(0); r < 3; r++ {
				rank, err := NewRank(corpus, r, 3, from)
				if err != nil {
					t.Fatal(err)
				}
				for _, b := range run(t, rank, cfg, 1<<20) {
					count(served, b)
				}
			}
			for tok := range all {
				want := 1
				if skipped[tok] > 0 {
					want = 0
				}
				if served[tok] != want || skipped[tok] > 1 {
					t.Fatalf("token %d served %d times (skipped %d times), want %d", tok, served[tok], skipped[tok], want)
				}
			}
		})
	}
}

// skippingRank is rank r of w from the start, its config's skip_steps in
// its log, as a session opens it.
func skippingRank(t *testing.T, c *Corpus, r, w uint32) *Rank {
	t.Helper()
	rank, err := NewRank(c, r, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rank.AddConfigSkips(); err != nil {
		t.Fatal(err)
	}
	return rank
}

// startSkipPipeline starts a pipeline of consumers over rank into a ring of
// slots slots, and stops it when the test ends.
func startSkipPipeline(t *testing.T, rank *Rank, cfg Config, slots, consumers int) (*Pipeline, memSlots, context.Context) {
	ring := newMemSlots(slots, cfg)
	p := NewPipeline(rank, ring, consumers)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		p.Close()
		<-done
		cancel()
	})
	return p, ring, ctx
}

// takeSteps reads n batches of consumer c, releasing each, and returns
// their steps and tokens.
func takeSteps(t *testing.T, ctx context.Context, p *Pipeline, ring memSlots, c, n, line int) ([]uint64, [][]int32) {
	t.Helper()
	var steps []uint64
	var toks [][]int32
	for range n {
		b, err := p.Next(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		steps = append(steps, b.Step)
		toks = append(toks, slices.Clone(int32s(ring.Slot(b.Slot))[:b.Lines*line]))
		if err := p.Release(c, b.Slot, b.Step); err != nil {
			t.Fatal(err)
		}
	}
	return steps, toks
}

// TestPipelineSkipSteps: a skip asked at run time while the producer has
// made batches of the range drops them and makes the rest again: the
// consumer reads steps up to k, then k+4 on, each the batch of a rank that
// skipped nothing at that data step; the state after k holds the range
// pending and resumes to step k+4, the state after a later step holds it
// passed; a step already read cannot be skipped, nor a range overlapping
// a logged one; the state asked after a step of the range is the one after
// the batch before it.
func TestPipelineSkipSteps(t *testing.T) {
	corpus, cfg := pipelineFixture(t, 0)
	ref, _ := NewRank(corpus, 0, 1, nil)
	want := run(t, ref, cfg, 20)
	rank, _ := NewRank(corpus, 0, 1, nil)
	p, ring, ctx := startSkipPipeline(t, rank, cfg, 4, 1)
	line := cfg.LineTokens()
	const k = 5
	skip := state.SkipRange{First: k + 1, Last: k + 3}
	takeSteps(t, ctx, p, ring, 0, k, line)
	for p.Ready(0) < 3 {
		time.Sleep(time.Millisecond)
	}
	gen := p.Generation()
	if _, err := p.SkipSteps(ctx, state.SkipRange{First: k, Last: k + 2}, k); !errors.Is(err, ErrStep) {
		t.Fatalf("a skip of a step already read: %v", err)
	}
	pending, err := p.SkipSteps(ctx, skip, k)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pending, []state.SkipRange{skip}) || p.Generation() != gen+1 {
		t.Fatalf("pending %v, generation %d (was %d)", pending, p.Generation(), gen)
	}
	if _, err := p.SkipSteps(ctx, state.SkipRange{First: k + 2, Last: k + 5}, k); !errors.Is(err, ErrStep) {
		t.Fatalf("a range overlapping a logged one: %v", err)
	}
	atK, err := p.State(k)
	if err != nil || !reflect.DeepEqual(atK.Skips, []state.SkipRange{skip}) {
		t.Fatalf("state after %d: skips %v, %v", k, atK.Skips, err)
	}
	steps, got := takeSteps(t, ctx, p, ring, 0, 5, line)
	if !reflect.DeepEqual(steps, []uint64{k + 4, k + 5, k + 6, k + 7, k + 8}) {
		t.Fatalf("steps after the skip: %v", steps)
	}
	if !reflect.DeepEqual(got, want[k+3:k+8]) {
		t.Fatal("the batches after the range differ from the data steps of a run that skipped nothing")
	}
	resumed, err := NewRank(corpus, 0, 1, saveWorld(t, corpus.Fingerprint(), []state.Rank{atK}))
	if err != nil {
		t.Fatal(err)
	}
	buf := batchBuf(cfg)
	if _, err := resumed.NextBatch(buf); err != nil || resumed.Step() != k+4 || !slices.Equal(buf[:len(want[k+3])], want[k+3]) {
		t.Fatalf("resumed after %d: made step %d (%v), want the batch of step %d", k, resumed.Step(), err, k+4)
	}
	later, err := p.State(k + 8)
	if err != nil || !reflect.DeepEqual(later.Skips, []state.SkipRange{skip}) || len(state.PendingSkips(later.Skips, later.Step)) != 0 {
		t.Fatalf("state after %d: skips %v, %v", k+8, later.Skips, err)
	}
}

// TestPipelineSkipStepsGroup: the two consumers of a group each ask for the
// same skip before reading its first step; the first remakes, the second
// finds it logged; both read the same steps, past the range.
func TestPipelineSkipStepsGroup(t *testing.T) {
	corpus, cfg := pipelineFixture(t, 0)
	rank, _ := NewRank(corpus, 0, 1, nil)
	p, ring, ctx := startSkipPipeline(t, rank, cfg, 4, 2)
	line := cfg.LineTokens()
	skip := state.SkipRange{First: 4, Last: 9}
	var steps [2][]uint64
	for c := range 2 {
		takeSteps(t, ctx, p, ring, c, 3, line)
	}
	for p.Ready(0) < 1 { // step 4, of the range, made: the skip remakes (generation 1)
		time.Sleep(time.Millisecond)
	}
	for range 2 {
		if _, err := p.SkipSteps(ctx, skip, 3); err != nil {
			t.Fatal(err)
		}
	}
	gen := p.Generation()
	for c := range 2 {
		steps[c], _ = takeSteps(t, ctx, p, ring, c, 2, line)
	}
	if gen != 1 || !reflect.DeepEqual(steps[0], []uint64{10, 11}) || !reflect.DeepEqual(steps[1], steps[0]) {
		t.Fatalf("generation %d, steps %v", gen, steps)
	}
}

// TestPendingSkipThenRescale: a world of 2 saves before a range it was
// asked to skip (at run time), and resumes on 3: the range is still
// pending in the merged state, and the 3 ranks skip its steps, of their
// own world: every token of those batches (those a resume without the
// range serves at those steps) is never served, every other exactly once.
func TestPendingSkipThenRescale(t *testing.T) {
	some := 0
	defer func() {
		if some == 0 {
			t.Error("no seed skipped a token: the test proves nothing")
		}
	}()
	for seed := int64(1); seed <= 10; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			ds, all := testCorpus(t, rng)
			cfg := randomConfig(rng, ds)
			corpus, err := OpenCorpus(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer corpus.Close()
			save := uint64(1 + rng.Intn(4))
			skip := state.SkipRange{First: save + 1 + uint64(rng.Intn(3)), Last: save + 4 + uint64(rng.Intn(4))}
			served, skipped := map[int32]int{}, map[int32]int{}
			var states []state.Rank
			for r := uint32(0); r < 2; r++ {
				rank, _ := NewRank(corpus, r, 2, nil)
				if err := rank.SkipSteps(0, skip); err != nil {
					t.Fatal(err)
				}
				for _, b := range run(t, rank, cfg, int(save)) {
					count(served, b)
				}
				states = append(states, rank.State())
			}
			from := saveWorld(t, corpus.Fingerprint(), states)
			if !reflect.DeepEqual(from.Skips, []state.SkipRange{skip}) {
				t.Fatalf("merged log %v, want %v pending", from.Skips, skip)
			}
			plain := *from
			plain.Skips = nil
			for r := uint32(0); r < 3; r++ {
				unskipped, err := NewRank(corpus, r, 3, &plain)
				if err != nil {
					t.Fatal(err)
				}
				for i, b := range run(t, unskipped, cfg, int(skip.Last-save)) {
					if skip.Contains(save + 1 + uint64(i)) {
						count(skipped, b)
					}
				}
				rank, _ := NewRank(corpus, r, 3, from)
				for _, b := range run(t, rank, cfg, 1<<20) {
					count(served, b)
				}
			}
			some += len(skipped)
			for tok := range all {
				want := 1
				if skipped[tok] > 0 {
					want = 0
				}
				if served[tok] != want || skipped[tok] > 1 {
					t.Fatalf("token %d served %d times (skipped %d times), want %d", tok, served[tok], skipped[tok], want)
				}
			}
		})
	}
}
