package session

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// skipRank is a fresh rank of the test job, and its batches' tokens.
func skipRank(t *testing.T) (*stream.Rank, uint64) {
	t.Helper()
	cfg := jobConfig(t, t.TempDir(), 0)
	c, err := stream.OpenCorpus(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	rank, err := stream.NewRank(c, 0, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rank, uint64(cfg.BatchSize) * uint64(cfg.LineTokens())
}

// TestSkipBoundedByTokens: a skip costs by the tokens it passes, so it is
// bounded by tokens as well as batches: 300 batches of 4 lines of 2^20
// tokens (under MaxSkip, 1.26 billion tokens) is refused by name before any
// work (with lines of 2^24 tokens the MaxSkip was 10.6 hours of a core).
func TestSkipBoundedByTokens(t *testing.T) {
	m := newManager(t, Config{})
	cfg := jobConfig(t, t.TempDir(), 0)
	cfg.SeqLen = 1 << 20
	_, err := m.Open(ctxT(t), Request{Job: "long", DPRank: 0, DPSize: 1, Transport: Inline, Config: cfg, SkipToStep: 300})
	if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "MaxSkipTokens") || !strings.Contains(err.Error(), "1073741824 tokens") {
		t.Fatalf("a skip of 300 batches of 2^22 tokens: %v", err)
	}
	rank, batch := skipRank(t)
	never := func() error { t.Fatal("a skip refused by its bound asked whether to stop"); return nil }
	if err := skipTo(context.Background(), rank, MaxSkipTokens/batch+1, batch, never); !errors.Is(err, ErrBadRequest) || rank.Step() != 0 {
		t.Fatalf("a skip one batch past MaxSkipTokens: %v, at step %d", err, rank.Step())
	}
}

// TestSkipStopsWhenCancelled: a skip in progress stops when its request's
// context is cancelled (the client gave up; the daemon used to skip on for
// hours), at the next line; and when the daemon shuts down, before the
// next batch, with ErrShuttingDown.
func TestSkipStopsWhenCancelled(t *testing.T) {
	rank, batch := skipRank(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	asked := 0
	stop := func() error {
		if asked++; asked == 5 {
			go cancel() // the client goes, from another goroutine
			<-ctx.Done()
		}
		return nil
	}
	if err := skipTo(ctx, rank, 1000, batch, stop); !errors.Is(err, context.Canceled) || rank.Step() != 4 || asked != 5 {
		t.Fatalf("a skip cancelled before its 5th batch: %v, at step %d after %d looks", err, rank.Step(), asked)
	}

	m := newManager(t, Config{})
	rank, batch = skipRank(t)
	asked = 0
	shutdown := func() error {
		if asked++; asked == 3 {
			m.Shutdown()
		}
		return m.stopped()
	}
	if err := skipTo(context.Background(), rank, 1000, batch, shutdown); !errors.Is(err, ErrShuttingDown) || rank.Step() != 2 {
		t.Fatalf("a skip across Shutdown: %v, at step %d", err, rank.Step())
	}
}

// TestMaxSkipStepsTold: the bound on a skip is one function of a batch's
// tokens, and the open's reply tells it, so that a client keeps the state
// it reopens from close enough: with batches over 2^25 tokens a client
// that kept its state every 32 batches was refused its reopen after a
// daemon restart (with 2^26-token batches the bound is 16 batches).
func TestMaxSkipStepsTold(t *testing.T) {
	for _, c := range []struct{ batch, want uint64 }{
		{1, MaxSkip}, {MaxSkipTokens / MaxSkip, MaxSkip}, {MaxSkipTokens/MaxSkip + 1, MaxSkipTokens / (MaxSkipTokens/MaxSkip + 1)},
		{1 << 26, 16}, {MaxSkipTokens, 2}, {1 << 40, 2}, {0, MaxSkip},
	} {
		if got := MaxSkipSteps(c.batch); got != c.want {
			t.Errorf("MaxSkipSteps(%d) = %d, want %d", c.batch, got, c.want)
		}
	}
	m := newManager(t, Config{})
	cfg := jobConfig(t, t.TempDir(), 0)
	cfg.SeqLen = 1 << 20
	o := mustOpen(t, m, Request{Job: "told", DPRank: 0, DPSize: 1, Transport: Inline, Config: cfg})
	batch := uint64(cfg.BatchSize) * uint64(cfg.LineTokens())
	if o.MaxSkipSteps != MaxSkipTokens/batch {
		t.Fatalf("the reply tells max_skip_steps %d for batches of %d tokens, want %d", o.MaxSkipSteps, batch, MaxSkipTokens/batch)
	}
	// Two batches are always allowed, however large.
	rank, small := skipRank(t)
	if err := skipTo(context.Background(), rank, 2, MaxSkipTokens*4, func() error { return nil }); err != nil || rank.Step() != 2 {
		t.Fatalf("a skip of 2 huge batches: %v, at step %d (batches of %d tokens here)", err, rank.Step(), small)
	}
}
