package stream

import (
	"context"
	"errors"
	"math/rand"
	"reflect"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/state"
)

// memSlots is a ring of byte slots in memory.
type memSlots [][]byte

func (m memSlots) Slots() int        { return len(m) }
func (m memSlots) Slot(i int) []byte { return m[i] }

func newMemSlots(n int, cfg Config) memSlots {
	m := make(memSlots, n)
	for i := range m {
		m[i] = make([]byte, int(cfg.BatchSize)*cfg.LineTokens()*4)
	}
	return m
}

func pipelineFixture(t *testing.T, epochs uint32) (*Corpus, Config) {
	rng := rand.New(rand.NewSource(7))
	ds, _ := testCorpus(t, rng)
	cfg := randomConfig(rng, ds)
	cfg.Epochs = epochs
	c, err := OpenCorpus(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, cfg
}

// TestPipelineConsumers: every consumer reads every batch, equal to what the
// rank produces alone; a slot is reused only after all consumers released it;
// the state after a consumed step resumes exactly there.
func TestPipelineConsumers(t *testing.T) {
	corpus, cfg := pipelineFixture(t, 0)
	ref, _ := NewRank(corpus, 1, 2, nil)
	want := run(t, ref, cfg, 35)

	rank, _ := NewRank(corpus, 1, 2, nil)
	ring := newMemSlots(3, cfg)
	p := NewPipeline(rank, ring, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	stopped := false
	defer func() {
		if !stopped {
			p.Close()
			<-done
		}
	}()

	held := consumeTwo(t, ctx, p, ring, want[:30], cfg.LineTokens())
	if err := p.Release(0, 0, 9999); !errors.Is(err, ErrUnknownSlot) {
		t.Fatalf("release of an unknown step: %v", err)
	}
	last := held[0][len(held[0])-1]
	if err := p.Release(0, last.Slot, last.Step); !errors.Is(err, ErrUnknownSlot) {
		t.Fatalf("second release of a slot: %v", err)
	}
	st, err := p.State(30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.State(3); !errors.Is(err, ErrStep) {
		t.Fatalf("state of a folded step: %v", err)
	}
	if _, err := p.State(10000); !errors.Is(err, ErrStep) {
		t.Fatalf("state of a step not produced: %v", err)
	}
	p.Close()
	stopped = true
	if err := <-done; !errors.Is(err, ErrClosed) && !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after Close: %v", err)
	}
	if _, err := p.Next(ctx, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after Close: %v", err)
	}

	// Resume at step 30: rank 1's batches 31.. match.
	other, _ := NewRank(corpus, 0, 2, nil)
	from := saveWorld(t, corpus.Fingerprint(), []state.Rank{other.State(), st})
	resumed, _ := NewRank(corpus, 1, 2, from)
	if got := run(t, resumed, cfg, 5); !reflect.DeepEqual(got, want[30:35]) {
		t.Fatal("resume from the pipeline's state at step 30 differs from steps 31-35")
	}
}

// consumeTwo takes the batches of want from p as two consumers, checking
// each against want: consumer 0 releases each at once, consumer 1 one step
// late. It returns the batches each was handed.
func consumeTwo(t *testing.T, ctx context.Context, p *Pipeline, ring Slots, want [][]int32, line int) [2][]Batch {
	t.Helper()
	var held [2][]Batch
	for step := 0; step < len(want); step++ {
		for c := 0; c < 2; c++ {
			b, err := p.Next(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			if b.Step != uint64(step+1) {
				t.Fatalf("consumer %d got step %d, want %d", c, b.Step, step+1)
			}
			got := int32s(ring.Slot(b.Slot))[:b.Lines*line]
			if !reflect.DeepEqual(got, want[step]) {
				t.Fatalf("consumer %d step %d differs from the rank's own batch", c, b.Step)
			}
			held[c] = append(held[c], b)
		}
		if step == 10 {
			// The ring is full with both consumers holding slots: the producer
			// must not get ahead by more than the ring.
			if r := p.Ready(0); r > 2 {
				t.Fatalf("%d batches ready with a 3-slot ring", r)
			}
		}
		b0 := held[0][len(held[0])-1]
		if err := p.Release(0, b0.Slot, b0.Step); err != nil {
			t.Fatal(err)
		}
		if len(held[1]) > 1 {
			b1 := held[1][len(held[1])-2]
			if err := p.Release(1, b1.Slot, b1.Step); err != nil {
				t.Fatal(err)
			}
		}
	}
	return held
}

// TestPipelineEnd: a bounded run ends with an End batch for every consumer.
func TestPipelineEnd(t *testing.T) {
	corpus, _ := pipelineFixture(t, 1)
	rank, _ := NewRank(corpus, 0, 1, nil)
	cfg := corpus.Config()
	p := NewPipeline(rank, newMemSlots(2, cfg), 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() { p.Close(); <-done }()
	n := 0
	for {
		b, err := p.Next(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if b.End {
			if b.Step != uint64(n) {
				t.Fatalf("end after step %d, %d batches seen", b.Step, n)
			}
			break
		}
		n++
		if err := p.Release(0, b.Slot, b.Step); err != nil {
			t.Fatal(err)
		}
	}
	if n == 0 {
		t.Fatal("no batches")
	}
	st, err := p.State(uint64(n))
	if err != nil || st.Step != uint64(n) {
		t.Fatalf("state after the last step: %v %v", st.Step, err)
	}
	// Steps past the end (a padding client's) have the final state at that
	// step; a rank resumed from it ends at once, after that step.
	past, err := p.State(uint64(n) + 3)
	if err != nil || past.Step != uint64(n)+3 || !reflect.DeepEqual(past.Shards, st.Shards) {
		t.Fatalf("state 3 steps past the end: %+v %v", past, err)
	}
	resumed, err := NewRank(corpus, 0, 1, saveWorld(t, corpus.Fingerprint(), []state.Rank{past}))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := resumed.NextBatchBytes(make([]byte, int(cfg.BatchSize)*cfg.LineTokens()*4)); err != nil || b.Lines != 0 || resumed.Step() != uint64(n)+3 {
		t.Fatalf("resumed past the end: %d lines, step %d, %v", b.Lines, resumed.Step(), err)
	}
}

// TestPipelineHooksAndReleaseThrough: a consumer that reads slots through
// the Produced hook and releases with ReleaseThrough sees every batch in
// order, equal to the rank alone; the producer reports waiting for slots;
// Finished reports the last step; Wait returns it; the state after any
// produced step resumes there.
func TestPipelineHooksAndReleaseThrough(t *testing.T) {
	corpus, cfg := pipelineFixture(t, 1)
	ref, _ := NewRank(corpus, 0, 1, nil)
	want := run(t, ref, cfg, 1<<20)

	rank, _ := NewRank(corpus, 0, 1, nil)
	ring := newMemSlots(2, cfg)
	p := NewPipeline(rank, ring, 1)
	produced := make(chan Batch, 4)
	var waits int
	finished := make(chan uint64, 1)
	p.SetHooks(Hooks{
		Produced: func(b Batch) { produced <- b },
		Finished: func(step uint64, err error) {
			if err != nil {
				t.Errorf("finished with %v", err)
			}
			finished <- step
		},
		SlotWait: func(w bool) {
			if w {
				waits++
			}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	line := cfg.LineTokens()
	var got [][]int32
	for len(got) < len(want) {
		b := <-produced
		if b.Step != uint64(len(got)+1) {
			t.Fatalf("step %d announced, want %d", b.Step, len(got)+1)
		}
		toks := int32s(ring.Slot(b.Slot))[:b.Lines*line]
		got = append(got, append([]int32(nil), toks...))
		if b.Step == 3 {
			if err := p.ReleaseThrough(0, b.Step+5); !errors.Is(err, ErrUnknownSlot) {
				t.Fatalf("release of unproduced steps: %v", err)
			}
			st, err := p.State(3)
			if err != nil {
				t.Fatal(err)
			}
			from := saveWorld(t, corpus.Fingerprint(), []state.Rank{st})
			again, _ := NewRank(corpus, 0, 1, from)
			if rest := run(t, again, cfg, 1<<20); !reflect.DeepEqual(rest, want[3:]) {
				t.Fatal("state after step 3 does not resume at step 4")
			}
		}
		if err := p.ReleaseThrough(0, b.Step); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatal("batches read through hooks differ from the rank alone")
	}
	last := <-finished
	if step, err := p.Wait(ctx); err != nil || step != last || last != uint64(len(want)) {
		t.Fatalf("Wait = %d, %v; finished at %d; want %d", step, err, last, len(want))
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if waits == 0 {
		t.Fatal("the producer never reported waiting for a slot of a 2-slot ring")
	}
}

// changedAt returns a rank's first k batches, then n more after its
// weights changed to weights at step k.
func changedAt(t *testing.T, corpus *Corpus, cfg Config, k uint64, n int, weights []float64) [][]int32 {
	t.Helper()
	ref, _ := NewRank(corpus, 0, 1, nil)
	want := run(t, ref, cfg, int(k))
	if err := ref.SetWeights(k, weights); err != nil {
		t.Fatal(err)
	}
	return append(want, run(t, ref, cfg, n)...)
}

// TestPipelineSetWeights: a change of weights at run time for the batch
// after step k, while the producer has already made later batches, drops
// them and makes them again: the consumer reads what a rank changed at step
// k produces; the states after k and after later steps log the change and
// resume to the same batches; a step already read cannot be changed.
func TestPipelineSetWeights(t *testing.T) {
	corpus, cfg := pipelineFixture(t, 0)
	if len(cfg.Datasets) < 2 {
		t.Fatal("the fixture needs two datasets")
	}
	weights := make([]float64, len(cfg.Datasets))
	weights[len(weights)-1] = 1 // the last dataset alone
	const k = 6
	want := changedAt(t, corpus, cfg, k, 14, weights)

	rank, _ := NewRank(corpus, 0, 1, nil)
	ring := newMemSlots(4, cfg)
	p := NewPipeline(rank, ring, 1)
	remade := uint64(0)
	p.SetHooks(Hooks{Remade: func(after uint64) { remade = after + 1 }})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		p.Close()
		<-done
	}()
	line := cfg.LineTokens()
	take := func(n int) [][]int32 {
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
	got := take(k)
	for p.Ready(0) < 3 { // the producer runs ahead: steps k+1.. exist
		time.Sleep(time.Millisecond)
	}
	gen := p.Generation()
	if err := p.SetWeights(ctx, k-1, k, weights); !errors.Is(err, ErrStep) {
		t.Fatalf("a change for a step already read: %v", err)
	}
	if err := p.SetWeights(ctx, k, k, weights); err != nil {
		t.Fatal(err)
	}
	if remade != k+1 || p.Generation() != gen+1 {
		t.Fatalf("remade from step %d (generation %d), want %d (%d)", remade, p.Generation(), k+1, gen+1)
	}
	// The states at k and later hold the change and resume to the same batches.
	states := map[uint64]state.Rank{}
	keep := func(at uint64) {
		st, err := p.State(at)
		if err != nil {
			t.Fatal(err)
		}
		states[at] = st
	}
	keep(k)
	got = append(got, take(9)...)
	keep(k + 9)
	got = append(got, take(5)...)
	if !reflect.DeepEqual(got, want) {
		t.Fatal("the batches after a change at run time differ from a rank changed at that step")
	}
	for _, at := range []uint64{k, k + 9} {
		st := states[at]
		if last := st.Mixture[len(st.Mixture)-1]; !last.Runtime || last.Step != k {
			t.Fatalf("state after %d: mixture log %+v", at, st.Mixture)
		}
		from := saveWorld(t, corpus.Fingerprint(), []state.Rank{st})
		resumed, err := NewRank(corpus, 0, 1, from)
		if err != nil {
			t.Fatal(err)
		}
		if r := run(t, resumed, cfg, 5); !reflect.DeepEqual(r, want[at:at+5]) {
			t.Fatalf("resumed after step %d: differs from the run changed at step %d", at, k)
		}
	}
	// A change for a batch not made yet is taken by the rank when it gets there.
	if err := p.SetWeights(ctx, 40, 20, []float64{1, 1, 1}[:len(weights)]); err != nil {
		t.Fatal(err)
	}
}

// TestPipelineSetWeightsGroup: the two consumers of a group each ask for the
// same change before reading its first batch; the first remakes, the second
// finds it made, and both read the batches of a rank changed at that step;
// a consumer asking for other weights at the same step is refused.
func TestPipelineSetWeightsGroup(t *testing.T) {
	corpus, cfg := pipelineFixture(t, 0)
	weights := []float64{0, 0, 1}[:len(cfg.Datasets)]
	weights[len(weights)-1] = 1
	const k = 4
	want := changedAt(t, corpus, cfg, k, 8, weights)
	rank, _ := NewRank(corpus, 0, 1, nil)
	ring := newMemSlots(4, cfg)
	p := NewPipeline(rank, ring, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		p.Close()
		<-done
	}()
	line := cfg.LineTokens()
	got := [2][][]int32{}
	take := func(c, n int) {
		for i := 0; i < n; i++ {
			b, err := p.Next(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			got[c] = append(got[c], append([]int32(nil), int32s(ring.Slot(b.Slot))[:b.Lines*line]...))
			if err := p.Release(c, b.Slot, b.Step); err != nil {
				t.Fatal(err)
			}
		}
	}
	take(0, k)
	take(1, k)
	if err := p.SetWeights(ctx, k, k, weights); err != nil {
		t.Fatal(err)
	}
	gen := p.Generation()
	take(0, 3) // consumer 0 reads on before consumer 1 asks
	if err := p.SetWeights(ctx, k, k, weights); err != nil || p.Generation() != gen {
		t.Fatalf("the second consumer's same change: %v, generation %d -> %d", err, gen, p.Generation())
	}
	other := append([]float64(nil), weights...)
	other[0] = 1
	if err := p.SetWeights(ctx, k, k, other); !errors.Is(err, ErrStep) {
		t.Fatalf("other weights for the same step in a group: %v", err)
	}
	take(1, 3)
	for i := 0; i < 5; i++ { // in step, as a ring of 4 slots shared by two readers needs
		take(0, 1)
		take(1, 1)
	}
	for c := range got {
		if !reflect.DeepEqual(got[c], want) {
			t.Fatalf("consumer %d's batches differ from a rank changed at step %d", c, k)
		}
	}
}
