package stream

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/state"
)

// only is the weights that mix dataset d alone.
func only(n, d int) []float64 {
	w := make([]float64, n)
	w[d] = 1
	return w
}

// runPipeline runs a pipeline over rank into a ring of 4 slots, for one
// consumer; take reads and releases its next n batches. Cleanup stops it.
func runPipeline(t *testing.T, rank *Rank, cfg Config) (context.Context, *Pipeline, func(n int) [][]int32) {
	t.Helper()
	ring := newMemSlots(4, cfg)
	p := NewPipeline(rank, ring, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		p.Close()
		<-done
		cancel()
	})
	line := cfg.LineTokens()
	take := func(n int) [][]int32 {
		t.Helper()
		var out [][]int32
		for i := 0; i < n; i++ {
			b, err := p.Next(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, append([]int32(nil), int32s(ring.Slot(b.Slot))[:b.Lines*line]...))
			if err := p.Release(0, b.Slot, b.Step); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	return ctx, p, take
}

// TestQueuedChangeKeptBySave is the README's pattern: at step 10 the
// trainer asks for new weights from batch 21 (after step 20), saves at step
// 15 and resumes. The state saved after the consumed step 15 holds the
// queued change (it used to hold the log [0] alone, and 5 of 15 batches
// after the resume equalled the uninterrupted run's), so the resumed rank
// serves what the uninterrupted one does, and so does a second save and
// resume before the change, and one after it.
func TestQueuedChangeKeptBySave(t *testing.T) {
	corpus, cfg := pipelineFixture(t, 0)
	n := len(cfg.Datasets)
	ref, _ := NewRank(corpus, 0, 1, nil)
	want := run(t, ref, cfg, 10)
	if err := ref.SetWeights(20, only(n, n-1)); err != nil {
		t.Fatal(err)
	}
	want = append(want, run(t, ref, cfg, 25)...)

	rank, _ := NewRank(corpus, 0, 1, nil)
	ctx, p, take := runPipeline(t, rank, cfg)
	got := take(10)
	if err := p.SetWeights(ctx, 20, 10, only(n, n-1)); err != nil {
		t.Fatal(err)
	}
	got = append(got, take(5)...)
	st, err := p.State(15)
	if err != nil {
		t.Fatal(err)
	}
	if q := state.Queued(st.Mixture, 15); len(q) != 1 || q[0].Step != 20 || !q[0].Runtime {
		t.Fatalf("state after step 15: mixture log %+v, want the change at step 20 queued", st.Mixture)
	}
	got = append(got, take(20)...)
	if !reflect.DeepEqual(got, want) {
		t.Fatal("the pipeline's batches differ from a rank changed at step 20")
	}
	from := saveWorld(t, corpus.Fingerprint(), []state.Rank{st})
	resumed, err := NewRank(corpus, 0, 1, from)
	if err != nil {
		t.Fatal(err)
	}
	mid := run(t, resumed, cfg, 3) // steps 16-18: saved again before the change
	again, err := NewRank(corpus, 0, 1, saveWorld(t, corpus.Fingerprint(), []state.Rank{resumed.State()}))
	if err != nil {
		t.Fatal(err)
	}
	rest := run(t, again, cfg, 17)
	for i, b := range append(mid, rest...) {
		if !reflect.DeepEqual(b, want[15+i]) {
			t.Fatalf("resumed at step 15: batch %d differs from the uninterrupted run's", 16+i)
		}
	}
	if m := again.State().Mixture; len(m) != 2 || m[1].Step != 20 || len(state.Queued(m, again.Step())) != 0 {
		t.Fatalf("after the change took effect: mixture log %+v", m)
	}
}

// TestQueueLongerThanTheLog: 70 changes queued at step 10 for steps 20 to
// 89, saved at step 15: more than MaxMixLog (64) entries, which used to push
// the weights in effect out of the saved log (0 of 20 batches equal). The
// state keeps the entry in effect and every queued one, and resumes to the
// uninterrupted run's batches; the history the log keeps stays bounded.
func TestQueueLongerThanTheLog(t *testing.T) {
	corpus, cfg := pipelineFixture(t, 0)
	n := len(cfg.Datasets)
	const queued = 70
	change := func(set func(after uint64, w []float64) error) {
		t.Helper()
		for i := 0; i < queued; i++ {
			if err := set(uint64(20+i), only(n, i%n)); err != nil {
				t.Fatal(err)
			}
		}
	}
	ref, _ := NewRank(corpus, 0, 1, nil)
	want := run(t, ref, cfg, 10)
	change(ref.SetWeights)
	want = append(want, run(t, ref, cfg, 90)...)

	rank, _ := NewRank(corpus, 0, 1, nil)
	ctx, p, take := runPipeline(t, rank, cfg)
	take(10)
	change(func(after uint64, w []float64) error { return p.SetWeights(ctx, after, 10, w) })
	take(5)
	st, err := p.State(15)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Mixture) != 1+queued || len(state.Queued(st.Mixture, 15)) != queued {
		t.Fatalf("state after step 15 logs %d entries, %d queued; want the one in effect and %d queued",
			len(st.Mixture), len(state.Queued(st.Mixture, 15)), queued)
	}
	resumed, err := NewRank(corpus, 0, 1, saveWorld(t, corpus.Fingerprint(), []state.Rank{st}))
	if err != nil {
		t.Fatal(err)
	}
	got := run(t, resumed, cfg, 85)
	for i, b := range got {
		if !reflect.DeepEqual(b, want[15+i]) {
			t.Fatalf("resumed at step 15 with %d changes queued: batch %d differs from the uninterrupted run's", queued, 16+i)
		}
	}
	if m := resumed.State().Mixture; len(m) != state.MaxMixLog || m[len(m)-1].Step != 20+queued-1 {
		t.Fatalf("after every change took effect the log keeps %d entries, last at step %d; want %d, the last at %d",
			len(m), m[len(m)-1].Step, state.MaxMixLog, 20+queued-1)
	}
}

// TestQueueBounded: at most state.MaxQueued changes wait for later batches
// (the queue used to grow by every call, 19 MiB a 100k calls); one more is
// refused with an error naming the bound, by the rank and by the pipeline,
// while a change that replaces queued ones is taken.
func TestQueueBounded(t *testing.T) {
	corpus, cfg := pipelineFixture(t, 0)
	n := len(cfg.Datasets)
	rank, _ := NewRank(corpus, 0, 1, nil)
	ctx, p, take := runPipeline(t, rank, cfg)
	take(2)
	ref, _ := NewRank(corpus, 0, 1, nil)
	for i := uint64(0); i < state.MaxQueued; i++ {
		if err := ref.SetWeights(10+i, only(n, int(i)%n)); err != nil {
			t.Fatalf("rank: change %d: %v", i, err)
		}
		if err := p.SetWeights(ctx, 10+i, 2, only(n, int(i)%n)); err != nil {
			t.Fatalf("pipeline: change %d: %v", i, err)
		}
	}
	want := fmt.Sprintf("at most %d may wait", state.MaxQueued)
	if err := ref.SetWeights(10+state.MaxQueued, only(n, 0)); !errors.Is(err, ErrStep) || !strings.Contains(err.Error(), want) {
		t.Fatalf("rank: change %d queued: %v, want ErrStep naming the bound", state.MaxQueued+1, err)
	}
	if err := p.SetWeights(ctx, 10+state.MaxQueued, 2, only(n, 0)); !errors.Is(err, ErrStep) || !strings.Contains(err.Error(), want) {
		t.Fatalf("pipeline: change %d queued: %v, want ErrStep naming the bound", state.MaxQueued+1, err)
	}
	// A change for step 12 replaces the changes from it on.
	if err := ref.SetWeights(12, only(n, 0)); err != nil {
		t.Fatal(err)
	}
	if err := p.SetWeights(ctx, 12, 2, only(n, 0)); err != nil {
		t.Fatal(err)
	}
	st, err := p.State(2)
	if err != nil {
		t.Fatal(err)
	}
	if q := state.Queued(st.Mixture, 2); len(q) != 3 || q[2].Step != 12 {
		t.Fatalf("after a change for step 12: queued %+v", q)
	}
	if q := state.Queued(ref.State().Mixture, 0); len(q) != 3 {
		t.Fatalf("rank after a change for step 12: queued %+v", q)
	}
	queueBoundedAhead(t, corpus, n)
}

// queueBoundedAhead: the pipeline bounds the queue of the state after the
// last consumed batch, not its rank's: with changes for steps 1 to 256
// queued and nothing consumed, a producer that made steps 1 to 4 took the
// first 3 in effect (its rank queues 253), yet a 257th change is refused,
// as the state at step 0 would queue 257, which no resume takes.
func queueBoundedAhead(t *testing.T, corpus *Corpus, n int) {
	rank, _ := NewRank(corpus, 0, 1, nil)
	for s := uint64(1); s <= state.MaxQueued; s++ {
		if err := rank.SetWeights(s, only(n, int(s)%n)); err != nil {
			t.Fatalf("change %d: %v", s, err)
		}
	}
	p := NewPipeline(rank, newMemSlots(4, corpus.Config()), 1)
	produced := make(chan uint64, 64)
	p.SetHooks(Hooks{Produced: func(b Batch) {
		select {
		case produced <- b.Step:
		default:
		}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		p.Close()
		<-done
	}()
	for s := uint64(0); s < 4; {
		select {
		case s = <-produced:
		case <-ctx.Done():
			t.Fatal("the producer did not fill the ring")
		}
	}
	err := p.SetWeights(ctx, 300, 0, only(n, 0))
	if !errors.Is(err, ErrStep) || !strings.Contains(err.Error(), fmt.Sprintf("%d changes of weights are queued", state.MaxQueued)) {
		t.Fatalf("change %d with %d queued after the consumed step 0: %v, want ErrStep naming the bound", state.MaxQueued+1, state.MaxQueued, err)
	}
	st, err := p.State(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewRank(corpus, 0, 1, &state.Restored{Step: 0, Shards: st.Shards, FromSize: 1, Mixture: st.Mixture}); err != nil {
		t.Fatalf("resuming the state after the consumed step 0: %v", err)
	}
}

// TestQueuedChangeThroughRescale: two ranks queue a change for step 20 at
// step 10 and save at step 15; three ranks resume, each from the merged
// files: each takes the queued change at step 20 (the batches after it are
// of the chosen dataset alone). Ranks whose queues disagree resume under
// the config's weights, the queue dropped, as ranks whose weights disagree
// do.
func TestQueuedChangeThroughRescale(t *testing.T) {
	corpus, cfg := pipelineFixture(t, 0)
	n := len(cfg.Datasets)
	states := func(queue func(r uint32) bool) *state.Restored {
		var sts []state.Rank
		for r := uint32(0); r < 2; r++ {
			rank, _ := NewRank(corpus, r, 2, nil)
			run(t, rank, cfg, 10)
			if queue(r) {
				if err := rank.SetWeights(20, only(n, n-1)); err != nil {
					t.Fatal(err)
				}
			}
			run(t, rank, cfg, 5)
			sts = append(sts, rank.State())
		}
		return saveWorld(t, corpus.Fingerprint(), sts)
	}
	from := states(func(uint32) bool { return true })
	for r := uint32(0); r < 3; r++ {
		rank, err := NewRank(corpus, r, 3, from)
		if err != nil {
			t.Fatal(err)
		}
		for s := 16; s <= 30; s++ {
			p, err := rank.NextBatch(batchBuf(cfg))
			if err != nil {
				t.Fatal(err)
			}
			if s > 20 && p.DatasetLines[n-1] != p.Lines {
				t.Fatalf("rank %d of 3, step %d: lines by dataset %v, want the change queued at step 20 in effect", r, s, p.DatasetLines)
			}
		}
	}
	differ := states(func(r uint32) bool { return r == 1 })
	if !differ.MixturesDiffer {
		t.Fatal("ranks whose queues differ merged as alike")
	}
	rank, err := NewRank(corpus, 0, 3, differ)
	if err != nil {
		t.Fatal(err)
	}
	if q := state.Queued(rank.State().Mixture, 15); len(q) != 0 {
		t.Fatalf("ranks whose queues differ: the resumed rank queues %+v", q)
	}
}

// TestHistoryTrimKeepsTheEntryInEffect: a hundred changes that take effect
// one a step leave MaxMixLog entries of history: the last in effect, and
// the configured entry a resume compares its config with (trimmed away, a
// resume took the config for changed and mixed by its weights), so a resume
// serves the uninterrupted batches.
func TestHistoryTrimKeepsTheEntryInEffect(t *testing.T) {
	corpus, cfg := pipelineFixture(t, 0)
	n := len(cfg.Datasets)
	rank, _ := NewRank(corpus, 0, 1, nil)
	ctx, p, take := runPipeline(t, rank, cfg)
	for s := uint64(0); s < 100; s++ {
		if err := p.SetWeights(ctx, s, s, only(n, int(s/7)%n)); err != nil {
			t.Fatal(err)
		}
		take(1)
	}
	st, err := p.State(100)
	if err != nil {
		t.Fatal(err)
	}
	if m := st.Mixture; len(m) != state.MaxMixLog || m[0].Runtime || m[1].Step != 100-state.MaxMixLog+1 || m[len(m)-1].Step != 99 {
		t.Fatalf("the log keeps %d entries: the first at step %d (made at run time: %v), the second at %d, the last at %d",
			len(m), m[0].Step, m[0].Runtime, m[1].Step, m[len(m)-1].Step)
	}
	want := take(10)
	resumed, err := NewRank(corpus, 0, 1, saveWorld(t, corpus.Fingerprint(), []state.Rank{st}))
	if err != nil {
		t.Fatal(err)
	}
	if got := run(t, resumed, cfg, 10); !reflect.DeepEqual(got, want) {
		t.Fatal("resumed after 100 changes: batches differ")
	}
}
