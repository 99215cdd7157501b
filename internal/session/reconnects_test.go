package session

import (
	"errors"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// reconnectWaits is the number of observations of
// dataloaderd_reconnect_wait_seconds.
func reconnectWaits(t *testing.T, m *Manager) uint64 {
	t.Helper()
	var d dto.Metric
	if err := m.metrics.reconnectWait.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetHistogram().GetSampleCount()
}

// TestFakeReconnectsBounded: a client that says it reconnects after a
// daemon restart, again and again on one daemon, is counted once (its
// first open: this daemon had not served its job and rank), and the lines
// its opens, refusals and closes log stay within the budget of its (user,
// job) while the clock stands still; when it moves on, the next line says
// how many were suppressed. Before, each fake reconnect was observed in
// the histogram and logged: 13 MB of log in 30 s.
func TestFakeReconnectsBounded(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	m := newManager(t, Config{Logger: zap.New(core)})
	now := time.Unix(1e9, 0)
	m.opens.now = func() time.Time { return now }
	cfg := jobConfig(t, t.TempDir(), 0)
	const rounds = 3 * lineBurst
	for i := 0; i < rounds; i++ {
		o, err := m.Open(ctxT(t), Request{UID: 5, Job: "faker", DPSize: 1, Transport: Inline, Config: cfg,
			ReconnectedAfter: time.Duration(i+1) * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		// A second open of the rank while it is open is refused.
		if _, err := m.Open(ctxT(t), Request{UID: 5, Job: "faker", DPSize: 1, Transport: Inline, Config: cfg,
			ReconnectedAfter: time.Second}); !errors.Is(err, ErrSessionExists) {
			t.Fatalf("a second open: %v", err)
		}
		if err := m.Close(5, o.ID, 0); err != nil {
			t.Fatal(err)
		}
	}
	if n := reconnectWaits(t, m); n != 1 {
		t.Errorf("%d reconnects observed in dataloaderd_reconnect_wait_seconds after %d fake ones, want 1 (the first)", n, rounds)
	}
	var d dto.Metric
	if err := m.metrics.reconnects.Write(&d); err != nil || d.GetCounter().GetValue() != 1 {
		n := d.GetCounter().GetValue()
		t.Errorf("dataloaderd_reconnects_total = %g, want 1", n)
	}
	if n := logs.Len(); n > lineBurst {
		t.Errorf("%d lines logged for %d rounds of fake reconnects, want at most %d", n, rounds, lineBurst)
	}
	now = now.Add(10 * time.Second)
	if _, err := m.Open(ctxT(t), Request{UID: 5, Job: "faker", DPSize: 1, Transport: Inline, Config: cfg,
		ReconnectedAfter: time.Second}); err != nil {
		t.Fatal(err)
	}
	// Each round logged 4 lines before: opened, reopened, refused, closed.
	next := logs.All()[lineBurst]
	if n, ok := next.ContextMap()["lines_suppressed"].(int64); !ok || n != 4*rounds-lineBurst {
		t.Errorf("the line after the pause: %q %v, want lines_suppressed %d", next.Message, next.ContextMap(), 4*rounds-lineBurst)
	}
	// Another job of the user has its own budget.
	mustOpen(t, m, Request{UID: 5, Job: "other", DPSize: 1, Transport: Inline, Config: cfg})
	if got := logs.FilterField(zap.String("job", "other")).FilterMessage("session opened").Len(); got != 1 {
		t.Errorf("another job's open logged %d lines, want 1", got)
	}
}

// TestGroupReconnectCounted: the consumers of a group coming back to a
// restarted daemon are each a reconnect: the first opens the session, the
// others join it.
func TestGroupReconnectCounted(t *testing.T) {
	m := newManager(t, Config{})
	cfg := jobConfig(t, t.TempDir(), 0)
	req := Request{UID: 5, Job: "group", DPSize: 1, Consumers: 3, Transport: Inline, Config: cfg, ReconnectedAfter: time.Second}
	for c := 0; c < 3; c++ {
		mustOpen(t, m, req)
	}
	if n := reconnectWaits(t, m); n != 3 {
		t.Errorf("%d reconnects observed for a group of 3 consumers, want 3", n)
	}
	// Without the claim, a fresh session of another job counts nothing.
	mustOpen(t, m, Request{UID: 5, Job: "fresh", DPSize: 1, Transport: Inline, Config: cfg})
	if n := reconnectWaits(t, m); n != 3 {
		t.Errorf("%d reconnects observed after a fresh open, want 3", n)
	}
}
