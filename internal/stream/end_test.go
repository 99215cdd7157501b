package stream

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/state"
)

// announcements models a ring's control block from the pipeline's hooks,
// as the session writes it: Produced publishes a step, Finished announces
// the end after the last one, Remade takes back the steps after a step
// (the end with them). It keeps the first announcement a client would have
// been misled by, and hands each end announced to finished.
type announcements struct {
	mu        sync.Mutex
	published uint64
	ended     bool
	bad       string
	finished  chan uint64
}

func newAnnouncements() *announcements { return &announcements{finished: make(chan uint64, 16)} }

func (a *announcements) wrong(format string, args ...any) {
	if a.bad == "" {
		a.bad = fmt.Sprintf(format, args...)
	}
}

func (a *announcements) hooks() Hooks {
	return Hooks{
		Produced: func(b Batch) {
			a.mu.Lock()
			defer a.mu.Unlock()
			if a.ended || b.Step != a.published+1 {
				a.wrong("step %d published after step %d (ended: %v)", b.Step, a.published, a.ended)
			}
			a.published = b.Step
		},
		Finished: func(step uint64, err error) {
			a.mu.Lock()
			if err != nil || step != a.published {
				a.wrong("the end announced after step %d (%v) with step %d published", step, err, a.published)
			}
			a.ended = true
			a.mu.Unlock()
			a.finished <- step
		},
		Remade: func(after uint64) {
			a.mu.Lock()
			defer a.mu.Unlock()
			if after >= a.published {
				a.wrong("steps after %d taken back with step %d published", after, a.published)
			}
			a.published, a.ended = after, false
		},
	}
}

// check fails unless the announcements a client reads end after step
// last, once the producer announced the end (Next may hand the end before
// the Finished hook ran).
func (a *announcements) check(ctx context.Context, t *testing.T, last uint64) {
	t.Helper()
	for {
		a.mu.Lock()
		bad, ended, published := a.bad, a.ended, a.published
		a.mu.Unlock()
		switch {
		case bad != "":
			t.Fatal("the control block would mislead a client: " + bad)
		case ended && published == last:
			return
		case ended:
			t.Fatalf("the control block ends after step %d, want the end after step %d", published, last)
		}
		select {
		case <-a.finished:
		case <-ctx.Done():
			t.Fatalf("the end was not announced (step %d published)", published)
		}
	}
}

// TestSetWeightsAtTheEnd: a bounded epoch of `last` steps; the consumer
// reads step last-k, then the weights change from batch last-k+1 on, once
// the producer had made the last batch and found the end (which used to
// end the epoch after step last-k: the remade rank was never run and the
// end stayed announced, and the last batches' tokens were lost). Every
// token is served exactly once, the epoch ends after the same step, the
// remade batches carry the new generation, and the control block the hooks
// write ends there. A consumer that stops at the end (stop); one that pads
// after it (pad: states past the end, a change of weights past it taken
// without remaking anything, a resume from there ends at once); one that
// was handed every batch and the end before it asked, as a message
// stream's consumer is (ahead); and one that changes the weights at each
// of the last steps (each).
func TestSetWeightsAtTheEnd(t *testing.T) {
	for seed := int64(1); seed <= 8; seed++ {
		rng := rand.New(rand.NewSource(seed))
		ds, all := testCorpus(t, rng)
		cfg := randomConfig(rng, ds)
		cfg.Epochs = 1
		corpus, err := OpenCorpus(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ref, _ := NewRank(corpus, 0, 1, nil)
		last := uint64(len(run(t, ref, cfg, 1<<20)))
		ws := func() []float64 { // positive: the remade rank serves every line left
			return []float64{float64(1 + rng.Intn(3)), float64(1 + rng.Intn(3)), float64(1 + rng.Intn(3))}
		}
		for _, mode := range []string{"stop", "pad", "ahead", "each"} {
			for k := uint64(1); k <= 4 && k < last; k++ {
				if mode == "each" && k != 4 {
					continue
				}
				e := endRun{t: t, corpus: corpus, cfg: cfg, last: last, mode: mode, served: map[int32]int{}}
				t.Run(fmt.Sprintf("%d/%s/k=%d", seed, mode, k), func(t *testing.T) {
					e.t = t
					e.run(k, ws)
					checkServed(t, e.served, all, 1)
				})
			}
		}
		corpus.Close()
	}
}

// endRun is one run of TestSetWeightsAtTheEnd.
type endRun struct {
	t      *testing.T
	corpus *Corpus
	cfg    Config
	last   uint64
	mode   string
	served map[int32]int

	p    *Pipeline
	ring memSlots
	ann  *announcements
	ctx  context.Context
}

func (e *endRun) next() Batch {
	e.t.Helper()
	b, err := e.p.Next(e.ctx, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

// consume counts a batch's tokens and releases it.
func (e *endRun) consume(b Batch) {
	e.t.Helper()
	count(e.served, int32s(e.ring.Slot(b.Slot))[:b.Lines*e.cfg.LineTokens()])
	if err := e.p.Release(0, b.Slot, b.Step); err != nil {
		e.t.Fatal(err)
	}
}

// change sets the weights from batch after+1 on once the producer found
// the end (its ends-th announcement), and checks that it remade them.
func (e *endRun) change(after uint64, ends int, ws []float64) {
	e.t.Helper()
	if e.mode != "ahead" {
		for ; ends > 0; ends-- {
			select {
			case <-e.ann.finished:
			case <-e.ctx.Done():
				e.t.Fatal("the producer did not reach the end")
			}
		}
	}
	gen := e.p.Generation()
	if err := e.p.SetWeights(e.ctx, after, after, ws); err != nil {
		e.t.Fatal(err)
	}
	if e.p.Generation() != gen+1 {
		e.t.Fatalf("weights changed after step %d of %d: generation %d, want %d", after, e.last, e.p.Generation(), gen+1)
	}
}

func (e *endRun) run(k uint64, ws func() []float64) {
	t := e.t
	rank, _ := NewRank(e.corpus, 0, 1, nil)
	e.ring = newMemSlots(int(k)+2, e.cfg) // room for the producer to find the end
	e.p = NewPipeline(rank, e.ring, 1)
	e.ann = newAnnouncements()
	e.p.SetHooks(e.ann.hooks())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e.ctx = ctx
	done := make(chan error, 1)
	go func() { done <- e.p.Run(ctx) }()
	defer func() {
		e.p.Close()
		<-done
	}()
	after := e.last - k
	step := uint64(0)
	for step < after {
		b := e.next()
		if b.End || b.Step != step+1 {
			t.Fatalf("step %d (end: %v) handed after step %d", b.Step, b.End, step)
		}
		e.consume(b)
		step = b.Step
	}
	switch e.mode {
	case "each":
		for s, ends := after, 1; s < e.last; s, ends = s+1, 1 {
			e.change(s, ends, ws())
			if b := e.next(); b.End || b.Step != s+1 {
				t.Fatalf("step %d (end: %v) handed after step %d", b.Step, b.End, s)
			} else {
				e.consume(b)
			}
		}
	case "ahead":
		for b := e.next(); !b.End; b = e.next() { // held, not read: the stream's consumer drops them
		}
		e.change(after, 1, ws())
	default:
		e.change(after, 1, ws())
	}
	gen := e.p.Generation()
	b := e.next()
	for ; !b.End; b = e.next() {
		if b.Generation != gen || b.Step <= after && e.mode != "each" {
			t.Fatalf("step %d handed in generation %d after the change (generation %d) from step %d", b.Step, b.Generation, gen, after+1)
		}
		e.consume(b)
	}
	if b.Step != e.last || b.Generation != gen {
		t.Fatalf("the epoch ends after step %d (generation %d), want %d (%d): its last batches were lost", b.Step, b.Generation, e.last, gen)
	}
	e.ann.check(ctx, t, e.last)
	if e.mode == "pad" {
		e.padPast()
	}
	if last, err := e.p.Wait(ctx); err != nil || last != e.last {
		t.Fatalf("Wait = %d, %v; want %d", last, err, e.last)
	}
}

// padPast is a padding consumer's steps after the end: the state at each,
// and a change of weights for a later one, taken without remaking a batch;
// a rank resumed from there ends at once.
func (e *endRun) padPast() {
	t := e.t
	gen := e.p.Generation()
	for s := e.last + 1; s <= e.last+3; s++ {
		if s == e.last+2 {
			if err := e.p.SetWeights(e.ctx, s, s, []float64{1, 1, 1}); err != nil || e.p.Generation() != gen {
				t.Fatalf("a change of weights after padding step %d: %v, generation %d (was %d)", s, err, e.p.Generation(), gen)
			}
		}
		if _, err := e.p.State(s); err != nil {
			t.Fatalf("the state at padding step %d: %v", s, err)
		}
	}
	st, _ := e.p.State(e.last + 3)
	resumed, err := NewRank(e.corpus, 0, 1, saveWorld(t, e.corpus.Fingerprint(), []state.Rank{st}))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := resumed.NextBatch(batchBuf(e.cfg)); err != nil || b.Lines != 0 {
		t.Fatalf("resumed after padding step %d: %d lines, %v", e.last+3, b.Lines, err)
	}
}

// TestSetWeightsWaitsForAnnouncements: a change of weights that comes
// while the producer announces its last batch (Produced) or the end
// (Finished) waits for that announcement before it takes back the steps
// after its own. It used to take them back first, and the late
// announcement then said a dropped batch was ready (a client would read a
// slot being made again) or that the epoch ended after the last step
// produced before the change (the later batches lost). synctest tells a
// change that waits from one that went ahead, without timing.
func TestSetWeightsWaitsForAnnouncements(t *testing.T) {
	corpus, cfg := pipelineFixture(t, 1)
	ref, _ := NewRank(corpus, 0, 1, nil)
	last := uint64(len(run(t, ref, cfg, 1<<20)))
	if last < 4 {
		t.Fatalf("the fixture's epoch has %d steps, want 4 at least", last)
	}
	for _, held := range []string{"Produced", "Finished"} {
		t.Run(held, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				ann := newAnnouncements()
				h := ann.hooks()
				at := uint64(3) // the announcement held: step 3's, or the end's
				if held == "Finished" {
					at = last
				}
				entered, proceed := make(chan struct{}), make(chan struct{})
				hold := func(step uint64) {
					if step == at && entered != nil {
						close(entered)
						entered = nil
						<-proceed
					}
				}
				wait := entered
				hooks := h
				if held == "Produced" {
					hooks.Produced = func(b Batch) { hold(b.Step); h.Produced(b) }
				} else {
					hooks.Finished = func(step uint64, err error) { hold(step); h.Finished(step, err) }
				}
				rank, _ := NewRank(corpus, 0, 1, nil)
				ring := newMemSlots(int(last)+1, cfg) // the producer reaches the end unreleased
				p := NewPipeline(rank, ring, 1)
				p.SetHooks(hooks)
				done := make(chan error, 1)
				go func() { done <- p.Run(ctx) }()
				<-wait
				after := at - 2
				changed := make(chan error, 1)
				go func() { changed <- p.SetWeights(ctx, after, after, []float64{1, 2, 3}) }()
				synctest.Wait() // the change is made, or waits for the producer
				close(proceed)
				if err := <-changed; err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				ann.mu.Lock()
				bad := ann.bad
				ann.mu.Unlock()
				if bad != "" {
					t.Fatalf("%s of step %d announced after the change from step %d took it back: %s", held, at, after+1, bad)
				}
				for step := uint64(1); ; step++ {
					b, err := p.Next(ctx, 0)
					if err != nil {
						t.Fatal(err)
					}
					if b.End {
						if b.Step != last {
							t.Fatalf("the epoch ends after step %d, want %d", b.Step, last)
						}
						break
					}
					if b.Step != step {
						t.Fatalf("step %d handed, want %d", b.Step, step)
					}
					if err := p.Release(0, b.Slot, b.Step); err != nil {
						t.Fatal(err)
					}
				}
				ann.check(ctx, t, last)
				if err := <-done; err != nil {
					t.Fatalf("Run after the final end: %v", err)
				}
			})
		})
	}
}
