package session

import (
	"context"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dataloaderd/dataloaderd/internal/state"
	"github.com/dataloaderd/dataloaderd/internal/stream"
	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// newManager is a Manager with its rings in a temp dir; cleanup shuts it
// down and checks that no ring file is left.
func newManager(t *testing.T, cfg Config) *Manager {
	t.Helper()
	cfg.ShmDir = filepath.Join(t.TempDir(), "shm")
	if err := os.Mkdir(cfg.ShmDir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg.Registry = prometheus.NewRegistry()
	res := stream.NewResources(1, 16<<20, nil)
	cfg.Resources = res
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Shutdown()
		res.Close()
		if left, _ := os.ReadDir(cfg.ShmDir); len(left) > 0 {
			t.Errorf("ring files left after shutdown: %v", left)
		}
	})
	return m
}

// jobConfig is a job over one small Megatron dataset written into dir;
// epochs 0 is unbounded.
func jobConfig(t *testing.T, dir string, epochs uint32) stream.Config {
	docs, _ := testcorpus.UniqueDocs(rand.New(rand.NewSource(1)), 200, 50, 1)
	prefix := testcorpus.Megatron(t, dir, "web", docs)
	return stream.Config{SeqLen: 15, BatchSize: 4, Seed: 9, LogicalShards: 8, BOS: -1, Epochs: epochs,
		Datasets: []stream.Dataset{{Name: "web", Path: prefix, Format: "megatron", Weight: 1}}}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustOpen(t *testing.T, m *Manager, req Request) Opened {
	t.Helper()
	o, err := m.Open(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestLifecycle: a session opens, a consumer attaches, takes and releases
// batches by messages, saves the state after one of them, and closes; its
// ring file is gone with it. The state saved equals the state given.
func TestLifecycle(t *testing.T) {
	m := newManager(t, Config{})
	cfg := jobConfig(t, t.TempDir(), 0)
	o := mustOpen(t, m, Request{Job: "j", DPRank: 1, DPSize: 2, Slots: 3, Config: cfg})
	if o.Transport != Shm || o.Ring.Slots != 3 || o.Ring.Path == "" || o.Ring.ControlPath != o.Ring.Path || o.LineTokens != 16 || o.BatchSize != 4 {
		t.Fatalf("opened %+v", o)
	}
	if _, err := m.Open(ctxT(t), Request{Job: "j", DPRank: 1, DPSize: 2, Config: cfg}); !errors.Is(err, ErrSessionExists) {
		t.Fatalf("a second open of a 1-consumer rank: %v", err)
	}
	feed, err := m.Attach(0, o.ID, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	for step := uint64(1); step <= 5; step++ {
		b, err := feed.Next(ctxT(t))
		if err != nil || b.Step != step || b.Lines != 4 || b.Data != nil {
			t.Fatalf("batch %+v, %v; want step %d of 4 lines, no inline data", b, err, step)
		}
		if err := feed.Release(b.Slot, b.Step, 1000); err != nil {
			t.Fatal(err)
		}
	}
	if err := feed.Release(2, 999, 0); !errors.Is(err, stream.ErrUnknownSlot) {
		t.Fatalf("a release of a step never handed out: %v", err)
	}
	snap, err := m.State(0, o.ID, 5)
	if err != nil || snap.DPRank != 1 || snap.DPSize != 2 {
		t.Fatalf("state: %+v %v", snap, err)
	}
	folder := t.TempDir()
	saved, err := m.Save(0, o.ID, 5, folder)
	if err != nil || saved.Path != filepath.Join(folder, state.Dir, state.FileName(1, 2)) {
		t.Fatalf("saved %+v, %v", saved, err)
	}
	if b, _ := os.ReadFile(saved.Path); string(b) != string(snap.State) || len(b) != saved.Bytes {
		t.Fatal("the saved file is not the state State gave")
	}
	if err := m.Close(0, o.ID, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(o.Ring.Path); !os.IsNotExist(err) || m.Sessions() != 0 {
		t.Fatalf("after close: %d sessions, ring file: %v", m.Sessions(), err)
	}
	if _, err := m.State(0, o.ID, 5); !errors.Is(err, ErrNoSession) {
		t.Fatalf("state of a closed session: %v", err)
	}
}

// TestGroupJoin: the consumers of a group join one session, get every
// batch each, and must ask for the same; one more than declared is refused.
func TestGroupJoin(t *testing.T) {
	m := newManager(t, Config{})
	cfg := jobConfig(t, t.TempDir(), 0)
	req := Request{Job: "tp", DPSize: 1, Consumers: 2, Transport: Inline, Config: cfg}
	a, b := mustOpen(t, m, req), mustOpen(t, m, req)
	if a.ID != b.ID || a.Consumer != 0 || b.Consumer != 1 {
		t.Fatalf("the second consumer did not join: %+v %+v", a, b)
	}
	if _, err := m.Open(ctxT(t), req); !errors.Is(err, ErrTooMany) || !strings.Contains(err.Error(), "2 consumers") {
		t.Fatalf("a third consumer: %v", err)
	}
	other := req
	other.Config.Seed = 10
	if _, err := m.Open(ctxT(t), other); !errors.Is(err, ErrConfigDiffers) {
		t.Fatalf("a consumer asking for another seed: %v", err)
	}
	var got [2][]string
	for c := range 2 {
		feed, err := m.Attach(0, a.ID, c, false)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			bt, err := feed.Next(ctxT(t))
			if err != nil || len(bt.Data) != bt.Lines*a.LineTokens*tokenBytes {
				t.Fatalf("inline batch of %d bytes for %d lines: %v", len(bt.Data), bt.Lines, err)
			}
			got[c] = append(got[c], string(bt.Data))
			if err := feed.Release(bt.Slot, bt.Step, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range got[0] {
		if got[0][i] != got[1][i] {
			t.Fatalf("consumers got different batch %d", i+1)
		}
	}
}

// TestCorpusShared: the ranks of one job share one opened corpus, closed
// with the last session.
func TestCorpusShared(t *testing.T) {
	m := newManager(t, Config{})
	cfg := jobConfig(t, t.TempDir(), 0)
	var ids []string
	for r := uint32(0); r < 2; r++ {
		ids = append(ids, mustOpen(t, m, Request{Job: "j", DPRank: r, DPSize: 2, Config: cfg}).ID)
	}
	m.corpora.mu.Lock()
	n, refs := len(m.corpora.open), 0
	for _, sc := range m.corpora.open {
		refs = sc.refs
	}
	m.corpora.mu.Unlock()
	if n != 1 || refs != 2 {
		t.Fatalf("%d corpora open with %d refs, want 1 with 2", n, refs)
	}
	for _, id := range ids {
		if err := m.Close(0, id, 0); err != nil {
			t.Fatal(err)
		}
	}
	m.corpora.mu.Lock()
	defer m.corpora.mu.Unlock()
	if m.Sessions() != 0 || len(m.corpora.open) != 0 {
		t.Fatalf("%d corpora still open after every session closed", len(m.corpora.open))
	}
}

// TestReclaim: a session whose consumer never attaches is reaped after
// AttachWithin; one whose consumer's stream ends without Close is dropped.
func TestReclaim(t *testing.T) {
	m := newManager(t, Config{AttachWithin: 100 * time.Millisecond})
	cfg := jobConfig(t, t.TempDir(), 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- m.Reap(ctx) }()
	mustOpen(t, m, Request{Job: "never", DPSize: 1, Config: cfg})
	o := mustOpen(t, m, Request{Job: "gone", DPSize: 1, Config: cfg})
	feed, err := m.Attach(0, o.ID, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Attach(0, o.ID, 0, false); !errors.Is(err, ErrSessionExists) {
		t.Fatalf("a second attach of consumer 0: %v", err)
	}
	for i := 0; i < 100 && m.Sessions() != 1; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if m.Sessions() != 1 {
		t.Fatalf("%d sessions, want the attached one only", m.Sessions())
	}
	feed.Detach(context.Canceled)
	if m.Sessions() != 0 {
		t.Fatalf("%d sessions after the only consumer's stream ended", m.Sessions())
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Reap returned %v", err)
	}
}

// TestShutdown: Shutdown closes every session (a waiting consumer's Next
// ends with ErrClosed) and refuses new ones.
func TestShutdown(t *testing.T) {
	m := newManager(t, Config{})
	cfg := jobConfig(t, t.TempDir(), 0)
	o := mustOpen(t, m, Request{Job: "j", DPSize: 1, Slots: 2, Config: cfg})
	feed, err := m.Attach(0, o.ID, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // take the ring's batches without releasing: the producer waits
		if _, err := feed.Next(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	next := make(chan error)
	go func() {
		_, err := feed.Next(ctxT(t))
		next <- err
	}()
	m.Shutdown()
	if err := <-next; !errors.Is(err, stream.ErrClosed) {
		t.Fatalf("Next across Shutdown: %v", err)
	}
	if _, err := m.Open(ctxT(t), Request{Job: "k", DPSize: 1, Config: cfg}); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("open after shutdown: %v", err)
	}
}

// TestSkipToStep: a session opened with SkipToStep starts after that step,
// and serves what a session that served the steps before it serves next;
// a skip past MaxSkip is refused by name.
func TestSkipToStep(t *testing.T) {
	m := newManager(t, Config{})
	cfg := jobConfig(t, t.TempDir(), 0)
	next := func(o Opened, n int) [][]byte {
		t.Helper()
		feed, err := m.Attach(0, o.ID, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		var out [][]byte
		for i := 0; i < n; i++ {
			b, err := feed.Next(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, append([]byte(nil), feed.ss.ring.Slot(b.Slot)[:b.Lines*cfg.LineTokens()*4]...))
			if err := feed.Release(b.Slot, b.Step, 0); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	full := next(mustOpen(t, m, Request{Job: "full", DPRank: 0, DPSize: 1, Config: cfg}), 12)
	skipped := mustOpen(t, m, Request{Job: "skip", DPRank: 0, DPSize: 1, Config: cfg, SkipToStep: 7})
	if skipped.StartStep != 7 {
		t.Fatalf("start step %d, want 7", skipped.StartStep)
	}
	if got := next(skipped, 5); !reflect.DeepEqual(got, full[7:]) {
		t.Fatal("a session skipped to step 7 serves other batches than steps 8-12")
	}
	if _, err := m.Open(ctxT(t), Request{Job: "far", DPRank: 0, DPSize: 1, Config: cfg, SkipToStep: MaxSkip + 1}); !errors.Is(err, ErrBadRequest) ||
		!strings.Contains(err.Error(), "skip_to_step") {
		t.Fatalf("a skip past MaxSkip: %v", err)
	}
}

// TestOpenerIsFirstConsumer: a second open of a one-consumer rank that
// finds the session the moment the first open made it findable is refused
// as a duplicate. Before, the first open took its consumer only after
// publishing the session, ignoring the error: the second open got consumer
// 0 and so did the first, two processes on one rank (seen 1 in 60 runs of
// TestConcurrentOpenOfOneGroup under -race).
func TestOpenerIsFirstConsumer(t *testing.T) {
	m := newManager(t, Config{})
	cfg := jobConfig(t, t.TempDir(), 0)
	req := Request{Job: "dup", DPSize: 1, Transport: Inline, Config: cfg}
	var second error
	m.published = func() {
		m.published = nil
		_, second = m.Open(ctxT(t), req)
	}
	if _, err := m.Open(ctxT(t), req); err != nil {
		t.Fatalf("the first open: %v", err)
	}
	if !errors.Is(second, ErrSessionExists) {
		t.Fatalf("an open of the rank between the first's publication and its reply: %v, want ErrSessionExists", second)
	}
}
