package session

import (
	"errors"
	"fmt"
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

// TestLinesBoundedPerUser: a client that names a new job at every open
// gets its user's burst of lines, not one burst per job (4,096 jobs of 64
// lines each before), and the user's lines come back at its rate.
func TestLinesBoundedPerUser(t *testing.T) {
	l := newOpenLedger()
	now := time.Unix(1e9, 0)
	l.now = func() time.Time { return now }
	logged := 0
	for i := 0; i < 10*maxLineKeys; i++ {
		if ok, _ := l.line(7, fmt.Sprintf("job-%d", i)); ok {
			logged++
		}
	}
	if logged != userBurst {
		t.Errorf("%d lines logged for %d jobs of one user, want its burst of %d", logged, 10*maxLineKeys, userBurst)
	}
	// Another user is not held back by this one.
	if ok, _ := l.line(8, "job-0"); !ok {
		t.Error("another user's first line was suppressed")
	}
	now = now.Add(10 * time.Second)
	logged = 0
	for i := 0; i < 1000; i++ {
		if ok, _ := l.line(7, fmt.Sprintf("later-%d", i)); ok {
			logged++
		}
	}
	if want := int(10 * userRate); logged != want {
		t.Errorf("%d lines logged 10 s later, want %d (the user's rate)", logged, want)
	}
}

// TestServedForgetsOldest: the keys a daemon remembers stay bounded, and
// once it has served more than it remembers, keys new to it still count
// as first opens (before, every key past the 65,536th was "cannot tell"
// for the daemon's life, so no reconnect was counted again), while a key
// served recently is still known.
func TestServedForgetsOldest(t *testing.T) {
	l := newOpenLedger()
	key := func(i int) sessionKey { return sessionKey{uid: 1, job: fmt.Sprintf("j%d", i)} }
	for i := 0; i < 3*maxSeenKeys; i++ {
		if !l.served(key(i)) {
			t.Fatalf("key %d, new to the daemon, was not a first open", i)
		}
	}
	if n := len(l.seen) + len(l.older); n > maxSeenKeys {
		t.Errorf("%d keys remembered, want at most %d", n, maxSeenKeys)
	}
	if l.served(key(3*maxSeenKeys - 1)) {
		t.Error("the key served last was not known")
	}
	if !l.served(key(0)) {
		t.Error("the first key, served long ago, is still remembered")
	}
}
