package stream

import (
	"context"
	"errors"
	"math/rand"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/objstore/s3test"
	"github.com/dataloaderd/dataloaderd/internal/source"
)

// hangGuard bounds the wait for something a test expects to end at once;
// it is no timing: only a hang reaches it.
const hangGuard = 2 * time.Minute

// throttled is a store behind a proxy that answers SlowDown to every
// request once forever is called, and that retries for 10 minutes: only a
// context can end its requests within a test.
type throttled struct {
	proxy *s3test.FaultProxy
	store *objstore.Store
}

func newThrottled(t *testing.T, srv *s3test.Server) *throttled {
	t.Helper()
	proxy := s3test.NewFaultProxy(t, srv.Endpoint, 0, 1)
	store := newStore(t, srv, proxy.URL, objstore.Options{BlockSize: 16 << 10, MemoryBytes: 256 << 10, RetryFor: 10 * time.Minute})
	return &throttled{proxy: proxy, store: store}
}

// forever makes the store refuse every request from now on.
func (th *throttled) forever() { th.proxy.SetFraction(1) }

// cancelOnRequest runs do and, once the proxy has seen a request more than
// it had when called, cancel (from this goroutine); it returns do's error.
func (th *throttled) cancelOnRequest(t *testing.T, what string, cancel func(), do func() error) error {
	t.Helper()
	seen := th.proxy.Requests()
	done := make(chan error, 1)
	go func() { done <- do() }()
	guard := time.After(hangGuard)
	for th.proxy.Requests() == seen {
		select {
		case err := <-done:
			t.Fatalf("%s ended before any request: %v", what, err)
		case <-guard:
			t.Fatalf("%s made no request", what)
		case <-time.After(5 * time.Millisecond):
		}
	}
	cancel()
	select {
	case err := <-done:
		return err
	case <-guard:
		t.Fatalf("%s still waits on the store after its context ended", what)
		return nil
	}
}

// TestObjectOpenCancelled: opening a dataset of every format against a
// store that throttles forever ends with context.Canceled, not bad input,
// when the open's context ends: at the listing or HEAD, and, where those
// are remembered from a listing, at the reads of the open (an index, a
// header, a footer). The open listed, HEADed and read with
// context.Background(): up to 10,000 pages x --object-retry-for, past the
// client leaving and past SIGTERM.
func TestObjectOpenCancelled(t *testing.T) {
	srv := s3test.Start(t)
	rng := rand.New(rand.NewSource(11))
	oc := newObjectCorpus(t, srv, "cancel", rng)
	for _, d := range oc.remote {
		th := newThrottled(t, srv)
		// The objects remembered: datasets resolved by HEADs reach their reads.
		if _, err := th.store.List(context.Background(), "cancel", "corpus/", true); err != nil {
			t.Fatal(err)
		}
		th.forever()
		cfg := objectConfig(t, rng, []Dataset{d})
		ctx, cancel := context.WithCancel(context.Background())
		gets := th.store.Stats().Gets
		err := th.cancelOnRequest(t, "open of "+d.Path, cancel, func() error {
			c, err := OpenCorpusContext(ctx, cfg, objectResources(t, th.store))
			if err == nil {
				c.Close()
			}
			return err
		})
		if !errors.Is(err, context.Canceled) || errors.Is(err, source.ErrInvalid) {
			t.Fatalf("open of %s cancelled: got %v, want context.Canceled and not ErrInvalid", d.Path, err)
		}
		t.Logf("%s (read at open: %v): %v", d.Path, th.store.Stats().Gets > gets, err)
	}
}

// TestObjectReadsStop: a read of an open corpus waiting on a store that
// throttles ends with context.Canceled once the corpus's reads are stopped
// (as the last session reading it does when it stops), not after
// --object-retry-for: a stopping session waited for it.
func TestObjectReadsStop(t *testing.T) {
	srv := s3test.Start(t)
	oc := newObjectCorpus(t, srv, "stop", rand.New(rand.NewSource(12)))
	th := newThrottled(t, srv)
	cfg := objectConfig(t, rand.New(rand.NewSource(12)), oc.remote[:1]) // Megatron: its .bin is read by Read only
	corpus, err := OpenCorpusContext(context.Background(), cfg, objectResources(t, th.store))
	if err != nil {
		t.Fatal(err)
	}
	defer corpus.Close()
	th.forever()
	src := corpus.datasets[0].src
	u := src.Units() / 2
	n, err := src.UnitLen(u)
	if err != nil || n == 0 {
		t.Fatalf("unit %d: %d tokens, %v", u, n, err)
	}
	err = th.cancelOnRequest(t, "read of a unit", corpus.StopReads, func() error {
		return src.Read(u, 0, make([]int32, n))
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("read after the corpus's reads stopped: got %v, want context.Canceled", err)
	}
	t.Log(err)
}
