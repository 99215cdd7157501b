package session

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/ring"
	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// TestRingBudget: sessions are refused once their rings would pass the
// budget, with an error naming the budget and its flag; a refused or
// failed open holds nothing, and a close gives its ring's bytes back.
// Before, any client could open sessions until the daemon was OOM-killed.
func TestRingBudget(t *testing.T) {
	cfg := jobConfig(t, t.TempDir(), 0)
	one := int64(3) * int64(ring.StrideFor(int(cfg.BatchSize)*cfg.LineTokens()*tokenBytes))
	m := newManager(t, Config{RingBudget: 2 * one})
	for _, tr := range []Transport{Shm, Inline} {
		t.Run(tr.String(), func(t *testing.T) {
			a := mustOpen(t, m, Request{Job: "a", DPRank: 0, DPSize: 2, Slots: 3, Transport: tr, Config: cfg})
			b := mustOpen(t, m, Request{Job: "a", DPRank: 1, DPSize: 2, Slots: 3, Transport: tr, Config: cfg})
			_, err := m.Open(ctxT(t), Request{Job: "b", DPRank: 0, DPSize: 1, Slots: 3, Transport: tr, Config: cfg})
			if !errors.Is(err, ErrOverBudget) || !strings.Contains(err.Error(), "--ring-budget-mb") || !strings.Contains(err.Error(), "2 open sessions") {
				t.Fatalf("a third ring past a budget of two: %v", err)
			}
			bad := cfg
			bad.Datasets = append([]stream.Dataset(nil), cfg.Datasets...)
			bad.Datasets[0].Path = "/nonexistent/web"
			if err := m.Close(0, b.ID, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := m.Open(ctxT(t), Request{Job: "c", DPRank: 0, DPSize: 1, Slots: 3, Transport: tr, Config: bad}); err == nil || errors.Is(err, ErrOverBudget) {
				t.Fatalf("an open that fails on its corpus: %v", err)
			}
			c := mustOpen(t, m, Request{Job: "b", DPRank: 0, DPSize: 1, Slots: 3, Transport: tr, Config: cfg})
			for _, id := range []string{a.ID, c.ID} {
				if err := m.Close(0, id, 0); err != nil {
					t.Fatal(err)
				}
			}
			if m.ringUsed != 0 {
				t.Fatalf("%d bytes of the budget held with no session open", m.ringUsed)
			}
		})
	}
}

// TestRingBytesCheckedFirst: a ring larger than a ring may be is refused
// from the request alone, before any corpus is opened or memory taken.
func TestRingBytesCheckedFirst(t *testing.T) {
	m := newManager(t, Config{})
	cfg := jobConfig(t, t.TempDir(), 0)
	cfg.BatchSize, cfg.SeqLen = 1<<31, 1<<24
	cfg.Datasets[0].Path = "/nonexistent/web" // never opened
	_, err := m.Open(ctxT(t), Request{Job: "big", DPRank: 0, DPSize: 1, Config: cfg})
	if !errors.Is(err, ring.ErrGeometry) || !strings.Contains(err.Error(), "limit of a ring") {
		t.Fatalf("a batch of 2^31 lines of 2^24 tokens: %v", err)
	}
}

// TestIdleLimit: an attached session whose consumer releases nothing for
// IdleLimit is reclaimed, and its consumer is told why; one that released
// within the limit is kept. Before, an attached idle stream held its ring
// for good.
func TestIdleLimit(t *testing.T) {
	const limit = time.Second
	m := newManager(t, Config{IdleLimit: limit, AttachWithin: time.Hour})
	cfg := jobConfig(t, t.TempDir(), 0)
	busy := mustOpen(t, m, Request{Job: "busy", DPRank: 0, DPSize: 1, Config: cfg})
	stuck := mustOpen(t, m, Request{Job: "stuck", DPRank: 0, DPSize: 1, Config: cfg})
	never := mustOpen(t, m, Request{Job: "never", DPRank: 0, DPSize: 1, Config: cfg}) // not attached: AttachWithin's
	feeds := map[string]*Feed{}
	for _, o := range []Opened{busy, stuck} {
		f, err := m.Attach(0, o.ID, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		feeds[o.ID] = f
	}
	b, err := feeds[stuck.ID].Next(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	m.reapAt(time.Now())
	if m.Sessions() != 3 {
		t.Fatalf("%d sessions right after attaching, want 3", m.Sessions())
	}
	time.Sleep(limit + limit/5)
	b2, err := feeds[busy.ID].Next(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := feeds[busy.ID].Release(b2.Slot, b2.Step, 0); err != nil {
		t.Fatal(err)
	}
	m.reapAt(time.Now())
	if _, err := m.State(0, stuck.ID, 0); !errors.Is(err, ErrNoSession) {
		t.Fatalf("the idle session is still open: %v", err)
	}
	_ = feeds[stuck.ID].Release(b.Slot, b.Step, 0) // too late, and harmless
	if _, err := feeds[stuck.ID].Next(ctxT(t)); !errors.Is(err, ErrNoSession) || !strings.Contains(err.Error(), "--idle-limit") {
		t.Fatalf("the idle consumer's next batch: %v, want the reclaim and its flag", err)
	}
	for _, o := range []Opened{busy, never} {
		if _, err := m.lookup(0, o.ID); err != nil {
			t.Fatalf("session %s reclaimed: %v", o.ID, err)
		}
	}
}

// TestSessionsPerUser: one user's sessions are bounded, others' are not
// counted against it. Before, 3,000 sessions of one client were accepted.
func TestSessionsPerUser(t *testing.T) {
	m := newManager(t, Config{MaxSessionsPerUser: 2})
	cfg := jobConfig(t, t.TempDir(), 0)
	mustOpen(t, m, Request{UID: 7, Job: "a", DPRank: 0, DPSize: 2, Config: cfg})
	b := mustOpen(t, m, Request{UID: 7, Job: "a", DPRank: 1, DPSize: 2, Config: cfg})
	_, err := m.Open(ctxT(t), Request{UID: 7, Job: "b", DPRank: 0, DPSize: 1, Config: cfg})
	if !errors.Is(err, ErrOverBudget) || !strings.Contains(err.Error(), "--max-sessions-per-user") {
		t.Fatalf("a third session of user 7: %v", err)
	}
	mustOpen(t, m, Request{UID: 8, Job: "b", DPRank: 0, DPSize: 1, Config: cfg})
	if err := m.Close(7, b.ID, 0); err != nil {
		t.Fatal(err)
	}
	mustOpen(t, m, Request{UID: 7, Job: "b", DPRank: 0, DPSize: 1, Config: cfg})
}

// TestHostRingsOutsideHeap: the ring memory the Go heap does not hold (shm
// rings) is told apart from inline rings, which it does, so that the
// runtime's soft memory limit leaves room for the first.
func TestHostRingsOutsideHeap(t *testing.T) {
	cfg := jobConfig(t, t.TempDir(), 0)
	one := int64(3) * int64(ring.StrideFor(int(cfg.BatchSize)*cfg.LineTokens()*tokenBytes))
	m := newManager(t, Config{})
	mustOpen(t, m, Request{Job: "a", DPRank: 0, DPSize: 2, Slots: 3, Transport: Inline, Config: cfg})
	if n := m.HostRingsOutsideHeap(); n != 0 {
		t.Fatalf("an inline session: %d bytes outside the heap", n)
	}
	b := mustOpen(t, m, Request{Job: "a", DPRank: 1, DPSize: 2, Slots: 3, Transport: Shm, Config: cfg})
	if n := m.HostRingsOutsideHeap(); n != one {
		t.Fatalf("an inline and a shm session: %d bytes outside the heap, want the shm ring's %d", n, one)
	}
	if err := m.Close(0, b.ID, 0); err != nil {
		t.Fatal(err)
	}
	if n := m.HostRingsOutsideHeap(); n != 0 {
		t.Fatalf("after the shm session closed: %d", n)
	}
}
