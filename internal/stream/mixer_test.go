package stream

import (
	"reflect"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/state"
)

// TestRemadeRankKeepsTheOlderHistory: the mixer keeps the one mixture log
// (the pipeline no longer keeps a copy), so a rank made again for a change
// of weights (after < produced) must carry the log a state after an older,
// unreleased step holds, not the log trimmed at the step it is made at. With
// 70 changes in effect by step 70 and one more at step 71, the state after
// the consumed step 70 keeps its history when a change at step 72 makes the
// rank of step 72 again.
func TestRemadeRankKeepsTheOlderHistory(t *testing.T) {
	corpus, cfg := pipelineFixture(t, 0)
	n := len(cfg.Datasets)
	rank, _ := NewRank(corpus, 0, 1, nil)
	ctx, p, take := runPipeline(t, rank, cfg)
	for s := uint64(0); s < 70; s++ {
		if err := p.SetWeights(ctx, s, s, only(n, int(s/7)%n)); err != nil {
			t.Fatal(err)
		}
		take(1)
	}
	if err := p.SetWeights(ctx, 71, 70, only(n, 1)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for p.Ready(0) < 3 { // steps 71 to 73 made: a change at 72 remakes
		if time.Now().After(deadline) {
			t.Fatal("the producer did not fill the ring")
		}
		time.Sleep(time.Millisecond)
	}
	before, err := p.State(70)
	if err != nil {
		t.Fatal(err)
	}
	gen := p.Generation()
	if err := p.SetWeights(ctx, 72, 70, only(n, 0)); err != nil {
		t.Fatal(err)
	}
	if p.Generation() != gen+1 {
		t.Fatal("the change at step 72 did not make the rank again")
	}
	after, err := p.State(70)
	if err != nil {
		t.Fatal(err)
	}
	history := func(m []state.MixChange) []state.MixChange { return m[:len(m)-len(state.Queued(m, 70))] }
	if h, want := history(after.Mixture), history(before.Mixture); !reflect.DeepEqual(h, want) {
		t.Fatalf("the state after step 70 holds %d entries of history after the rank was made again at step 72, %d before (first runtime steps %d, %d)",
			len(h), len(want), h[1].Step, want[1].Step)
	}
	if q := state.Queued(after.Mixture, 70); len(q) != 2 || q[0].Step != 71 || q[1].Step != 72 {
		t.Fatalf("the state after step 70 queues %+v, want the changes at steps 71 and 72", q)
	}
}
