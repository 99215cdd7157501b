package session

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dataloaderd/dataloaderd/internal/mapped"
)

// drain takes and releases batches of a feed until it fails (or 10000
// batches pass), returning the error.
func drain(t *testing.T, f *Feed) error {
	t.Helper()
	for i := 0; i < 10000; i++ {
		b, err := f.Next(ctxT(t))
		if err != nil {
			return err
		}
		if err := f.Release(b.Slot, b.Step, 0); err != nil {
			return err
		}
	}
	return nil
}

// takeSome takes and releases n batches, which must come.
func takeSome(t *testing.T, f *Feed, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		b, err := f.Next(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Release(b.Slot, b.Step, 0); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCorpusTruncatedUnderASession: a corpus file cut short while a session
// reads it (cp over it truncates it first) fails that session, with an
// error naming the file; another session on another corpus goes on, and
// the daemon lives. Before, the fault killed the process.
func TestCorpusTruncatedUnderASession(t *testing.T) {
	m := newManager(t, Config{})
	victimCfg, otherCfg := jobConfig(t, t.TempDir(), 0), jobConfig(t, t.TempDir(), 0)
	victim := mustOpen(t, m, Request{Job: "victim", DPRank: 0, DPSize: 1, Transport: Inline, Config: victimCfg})
	other := mustOpen(t, m, Request{Job: "other", DPRank: 0, DPSize: 1, Transport: Inline, Config: otherCfg})
	vf, err := m.Attach(0, victim.ID, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	of, err := m.Attach(0, other.ID, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	takeSome(t, vf, 2)
	bin := victimCfg.Datasets[0].Path + ".bin"
	if err := os.Truncate(bin, 0); err != nil {
		t.Fatal(err)
	}
	err = drain(t, vf)
	if !errors.Is(err, mapped.ErrFault) || !strings.Contains(err.Error(), bin) {
		t.Fatalf("the session over the truncated file: %v, want a fault naming %s", err, bin)
	}
	takeSome(t, of, 50)
}

// TestRingTruncatedByItsClient: a client that cuts its own ring file short
// fails its own session, with an error naming the ring; other sessions go
// on.
func TestRingTruncatedByItsClient(t *testing.T) {
	m := newManager(t, Config{})
	cfg := jobConfig(t, t.TempDir(), 0)
	victim := mustOpen(t, m, Request{Job: "victim", DPRank: 0, DPSize: 1, Transport: Shm, Config: cfg})
	other := mustOpen(t, m, Request{Job: "other", DPRank: 0, DPSize: 1, Transport: Shm, Config: cfg})
	vf, err := m.Attach(0, victim.ID, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	of, err := m.Attach(0, other.ID, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	takeSome(t, vf, 2)
	if err := os.Truncate(victim.Ring.Path, 0); err != nil {
		t.Fatal(err)
	}
	err = drain(t, vf)
	if !errors.Is(err, mapped.ErrFault) || !strings.Contains(err.Error(), victim.Ring.Path) {
		t.Fatalf("the session whose ring was cut short: %v, want a fault naming %s", err, victim.Ring.Path)
	}
	takeSome(t, of, 50)
	// A scrape reads every live control block, the cut one too.
	if _, err := m.cfg.Registry.(*prometheus.Registry).Gather(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(0, victim.ID, 0); err != nil {
		t.Fatal(err)
	}
}
