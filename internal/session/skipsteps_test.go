package session

import (
	"reflect"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/dataloaderd/dataloaderd/internal/state"
)

// TestSkipStepsCounted: a session of a config with skip_steps [3, 4]
// tells its client the range at open, serves 1, 2, then 5 on; a skip asked
// at run time (7 to 9) is answered with the ranges pending and served
// past; the batches skipped and their tokens are counted
// (dataloaderd_skipped_batches_total, dataloaderd_skipped_tokens_total).
func TestSkipStepsCounted(t *testing.T) {
	m := newManager(t, Config{})
	cfg := jobConfig(t, t.TempDir(), 0)
	cfg.SkipSteps = []state.SkipRange{{First: 3, Last: 4}}
	o := mustOpen(t, m, Request{Job: "j", DPRank: 0, DPSize: 1, Slots: 3, Config: cfg})
	if !reflect.DeepEqual(o.Skips, cfg.SkipSteps) {
		t.Fatalf("opened with skips %v, want %v", o.Skips, cfg.SkipSteps)
	}
	feed, err := m.Attach(0, o.ID, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	var steps []uint64
	take := func(n int) {
		for range n {
			b, err := feed.Next(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			steps = append(steps, b.Step)
			if err := feed.Release(b.Slot, b.Step, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	take(3)
	_, pending, err := m.SkipSteps(ctxT(t), 0, o.ID, 7, 9, 5)
	if err != nil || !reflect.DeepEqual(pending, []state.SkipRange{{First: 7, Last: 9}}) {
		t.Fatalf("skip 7 to 9: pending %v, %v", pending, err)
	}
	take(2)
	if !reflect.DeepEqual(steps, []uint64{1, 2, 5, 6, 10}) {
		t.Fatalf("served steps %v", steps)
	}
	if n := counted(t, m.metrics.skippedBatches); n != 5 {
		t.Fatalf("dataloaderd_skipped_batches_total %v, want 5", n)
	}
	if n, want := counted(t, m.metrics.skippedTokens), float64(5*cfg.BatchSize)*float64(cfg.LineTokens()); n != want {
		t.Fatalf("dataloaderd_skipped_tokens_total %v, want %v", n, want)
	}
}

// counted is a counter's value.
func counted(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var out dto.Metric
	if err := c.Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetCounter().GetValue()
}
