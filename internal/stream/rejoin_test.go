package stream

import (
	"context"
	"math"
	"reflect"
	"testing"
	"time"
)

// TestPipelineRejoin: a consumer put back by Rejoin is handed again the
// steps it held without releasing (one released out of order past them
// too), then the rest; with the other consumer's, its batches are the
// rank's own, each step after the returned one exactly once.
func TestPipelineRejoin(t *testing.T) {
	p, ring, cfg, want, ctx := twoConsumers(t)

	take := func(c int) Batch {
		t.Helper()
		b, err := p.Next(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if got := int32s(ring.Slot(b.Slot))[:b.Lines*cfg.LineTokens()]; !reflect.DeepEqual(got, want[b.Step-1]) {
			t.Fatalf("consumer %d step %d differs from the rank's own batch", c, b.Step)
		}
		return b
	}
	// Consumer 0 takes steps 1-4, releases 1, 2 and (out of order) 4, and
	// its process dies holding 3.
	var held []Batch
	for i := 0; i < 4; i++ {
		held = append(held, take(0))
	}
	for _, i := range []int{0, 1, 3} {
		if err := p.Release(0, held[i].Slot, held[i].Step); err != nil {
			t.Fatal(err)
		}
	}
	// Consumer 1 reads on to step 4.
	for i := 0; i < 4; i++ {
		b := take(1)
		if err := p.Release(1, b.Slot, b.Step); err != nil {
			t.Fatal(err)
		}
	}
	if got := p.Rejoin(0, math.MaxUint64); got != 2 {
		t.Fatalf("Rejoin: step %d, want 2 (3 was held, not released)", got)
	}
	for step := uint64(3); step <= 12; step++ {
		b := take(0)
		if b.Step != step {
			t.Fatalf("after Rejoin consumer 0 got step %d, want %d", b.Step, step)
		}
		if err := p.Release(0, b.Slot, b.Step); err != nil {
			t.Fatal(err)
		}
		if step > 4 {
			b1 := take(1)
			if err := p.Release(1, b1.Slot, b1.Step); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A consumer of the control block (releases through a step) rejoins
	// at the step it released.
	if err := p.ReleaseThrough(1, 12); err != nil {
		t.Fatal(err)
	}
	if got := p.Rejoin(1, math.MaxUint64); got != 12 {
		t.Fatalf("Rejoin of a consumer that released through 12: %d", got)
	}
}

// TestPipelineRejoinGroup: two consumers of a group whose processes died
// together, one having released through step 4 and the other through 2,
// both go on from step 3 (Rejoin bounded by the earliest ReleasedThrough),
// and read the rank's own batches in lockstep from there.
func TestPipelineRejoinGroup(t *testing.T) {
	p, ring, cfg, want, ctx := twoConsumers(t)
	step := func(c int, release bool) uint64 {
		t.Helper()
		b, err := p.Next(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if got := int32s(ring.Slot(b.Slot))[:b.Lines*cfg.LineTokens()]; !reflect.DeepEqual(got, want[b.Step-1]) {
			t.Fatalf("consumer %d step %d differs from the rank's own batch", c, b.Step)
		}
		if release {
			if err := p.Release(c, b.Slot, b.Step); err != nil {
				t.Fatal(err)
			}
		}
		return b.Step
	}
	for i := 0; i < 4; i++ {
		step(0, true) // releases 1-4
	}
	step(1, true)
	step(1, true)
	step(1, false) // holds 3 as its process dies
	bound := min(p.ReleasedThrough(0), p.ReleasedThrough(1))
	if bound != 2 {
		t.Fatalf("the group's earliest release: %d, want 2", bound)
	}
	for c := range 2 {
		if got := p.Rejoin(c, bound); got != 2 {
			t.Fatalf("consumer %d rejoined after step %d, want 2", c, got)
		}
	}
	for want := uint64(3); want <= 12; want++ {
		for c := range 2 {
			if got := step(c, true); got != want {
				t.Fatalf("consumer %d got step %d, want %d in lockstep", c, got, want)
			}
		}
	}
}

// twoConsumers runs a pipeline of rank 0 of 1 with two consumers into a
// ring of 4 slots until the test ends; want is the rank's first 12 batches
// read alone.
func twoConsumers(t *testing.T) (*Pipeline, memSlots, Config, [][]int32, context.Context) {
	t.Helper()
	corpus, cfg := pipelineFixture(t, 0)
	ref, _ := NewRank(corpus, 0, 1, nil)
	want := run(t, ref, cfg, 12)
	rank, _ := NewRank(corpus, 0, 1, nil)
	ring := newMemSlots(4, cfg)
	p := NewPipeline(rank, ring, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() { p.Close(); <-done; cancel() })
	return p, ring, cfg, want, ctx
}
