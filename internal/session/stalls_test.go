package session

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/dataloaderd/dataloaderd/internal/stream"
)

func costOf(by map[stream.Cause]time.Duration) stream.Cost {
	var c stream.Cost
	for cause, d := range by {
		c[cause] = d
	}
	return c
}

// TestWaitSplitByCause: a wait is split among its batch's causes up to the
// batch's time, the rest is held; both are per consumer.
func TestWaitSplitByCause(t *testing.T) {
	ms := float64(time.Millisecond) / 1e9
	cost := costOf(map[stream.Cause]time.Duration{stream.CauseTokenize: 6 * time.Millisecond, stream.CausePack: 2 * time.Millisecond})
	for _, tc := range []struct {
		name      string
		consumers int
		waitMs    uint64
		want      map[stream.Cause]float64 // ms per consumer
	}{
		{"longer than the batch", 1, 10, map[stream.Cause]float64{stream.CauseTokenize: 6, stream.CausePack: 2, stream.CauseOther: 2}},
		{"shorter than the batch", 1, 4, map[stream.Cause]float64{stream.CauseTokenize: 3, stream.CausePack: 1}},
		{"two consumers", 2, 10, map[stream.Cause]float64{stream.CauseTokenize: 3, stream.CausePack: 1, stream.CauseOther: 1}},
	} {
		w := newWaitMeter(tc.consumers, 0, zap.NewNop())
		w.waited(3, 3, tc.waitMs*uint64(time.Millisecond), cost)
		w.waited(4, 4, 0, cost) // no wait: nothing counted
		wait, late := w.snapshot()
		if want := float64(tc.waitMs) / float64(tc.consumers) * ms; math.Abs(wait-want) > 1e-12 {
			t.Errorf("%s: wait %v s, want %v", tc.name, wait, want)
		}
		for c := range late {
			if want := tc.want[stream.Cause(c)] * ms; math.Abs(late[c]-want) > 1e-12 {
				t.Errorf("%s: late %s %v s, want %v", tc.name, stream.Cause(c), late[c], want)
			}
		}
	}
}

// TestStallLogged: a wait at the threshold is logged with its main cause
// and the batch's time by cause; within a minute the next is only counted,
// and the line after says how many were not logged.
func TestStallLogged(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	w := newWaitMeter(1, 50*time.Millisecond, zap.New(core))
	cost := costOf(map[stream.Cause]time.Duration{stream.CauseObjectStorage: 70 * time.Millisecond, stream.CausePack: time.Millisecond})
	w.waited(7, 7, uint64(49*time.Millisecond), cost) // under the threshold
	w.waited(8, 8, uint64(80*time.Millisecond), cost)
	w.waited(9, 9, uint64(90*time.Millisecond), cost)
	lines := logs.All()
	if len(lines) != 1 {
		t.Fatalf("%d stall lines, want 1: %v", len(lines), lines)
	}
	f := lines[0].ContextMap()
	if f["cause"] != "object_storage" || f["step"] != uint64(8) || f["wait"] != 80*time.Millisecond || f["object_storage"] != 70*time.Millisecond {
		t.Errorf("stall line %v", f)
	}
	w.logged = time.Now().Add(-2 * stallLogEvery)
	w.waited(10, 12, uint64(60*time.Millisecond), stream.Cost{})
	if lines = logs.All(); len(lines) != 2 {
		t.Fatalf("%d stall lines, want 2", len(lines))
	}
	f = lines[1].ContextMap()
	if f["cause"] != "other" || f["stalls_not_logged"] != int64(1) || f["from_step"] != uint64(10) {
		t.Errorf("second stall line %v", f)
	}
}

// TestRankWaitsExported: a consumer that takes batches as fast as they come
// waits for them; the session's wait series is what it reported, split by
// cause in full, and both go when the session closes.
func TestRankWaitsExported(t *testing.T) {
	m := newManager(t, Config{})
	cfg := jobConfig(t, t.TempDir(), 0)
	o := mustOpen(t, m, Request{Job: "starved", DPRank: 1, DPSize: 2, Slots: 2, Config: cfg})
	feed, err := m.Attach(0, o.ID, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	var waited uint64
	for i := 0; i < 40; i++ {
		asked := time.Now()
		b, err := feed.Next(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		ns := uint64(time.Since(asked)) + 1
		waited += ns
		if err := feed.Release(b.Slot, b.Step, ns); err != nil {
			t.Fatal(err)
		}
	}
	reg := m.cfg.Registry.(*prometheus.Registry)
	wait, late := rankSeries(t, reg, "starved", "1")
	if want := float64(waited) / 1e9; math.Abs(wait-want) > 1e-9 {
		t.Errorf("wait %v s, want the %v s reported", wait, want)
	}
	var sum float64
	for _, s := range late {
		sum += s
	}
	if math.Abs(sum-wait) > 1e-9 || late["read"] <= 0 || late["tokenize"] != 0 || late["object_storage"] != 0 {
		t.Errorf("late %v (sum %v), want the wait %v in full, some of it reading a local file, none tokenizing or in object storage", late, sum, wait)
	}
	if err := m.Close(0, o.ID, 0); err != nil {
		t.Fatal(err)
	}
	if wait, late := rankSeries(t, reg, "starved", "1"); wait >= 0 || len(late) != 0 {
		t.Errorf("series left after close: wait %v, late %v", wait, late)
	}
}

// rankSeries reads a session's wait (-1: none) and late series by cause.
func rankSeries(t *testing.T, reg *prometheus.Registry, job, rank string) (float64, map[string]float64) {
	t.Helper()
	wait, late := -1.0, map[string]float64{}
	for _, f := range mustGather(t, reg) {
		for _, mt := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range mt.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["training_job"] != job || l["dp_rank"] != rank {
				continue
			}
			switch f.GetName() {
			case "dataloaderd_rank_wait_seconds_total":
				wait = mt.GetCounter().GetValue()
			case "dataloaderd_rank_late_seconds_total":
				late[l["cause"]] = mt.GetCounter().GetValue()
			}
		}
	}
	return wait, late
}
