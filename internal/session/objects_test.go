package session

import (
	"context"
	"errors"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/objstore/s3test"
	"github.com/dataloaderd/dataloaderd/internal/stream"
	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// TestObjectOpenCancelled: the open of a session whose corpus is in a store
// that throttles every request ends with context.Canceled when the open's
// context ends (the client gone), although the store's retries would go on
// for 10 minutes (the open listed and read with context.Background()). A
// rank waiting for that opening to share it is not failed by the other's
// context: it opens the corpus itself, and succeeds once the store answers.
func TestObjectOpenCancelled(t *testing.T) {
	srv := objectCorpus(t)
	proxy := s3test.NewFaultProxy(t, srv.Endpoint, 1, 1)
	useStore(t, srv, proxy.URL)
	store, err := objstore.New(objstore.Options{RetryFor: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	m := newManager(t, Config{Objects: store})
	cfg := stream.Config{SeqLen: 15, BatchSize: 4, Seed: 9, LogicalShards: 8, BOS: -1,
		Datasets: []stream.Dataset{{Name: "web", Path: "s3://bucket/corpus/web", Format: "megatron", Weight: 1}}}

	guard := time.After(2 * time.Minute) // a hang only, not a timing
	open := func(ctx context.Context, rank uint32) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := m.Open(ctx, Request{Job: "j", DPRank: rank, DPSize: 2, Config: cfg})
			done <- err
		}()
		return done
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for !ok() {
			select {
			case <-guard:
				t.Fatalf("no %s", what)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	refs := func() int {
		m.corpora.mu.Lock()
		defer m.corpora.mu.Unlock()
		n := 0
		for _, sc := range m.corpora.open {
			n += sc.refs
		}
		return n
	}
	result := func(what string, done <-chan error) error {
		t.Helper()
		select {
		case err := <-done:
			return err
		case <-guard:
			t.Fatalf("%s still waits on the store", what)
			return nil
		}
	}

	ctx0, cancel0 := context.WithCancel(context.Background())
	defer cancel0()
	done0 := open(ctx0, 0)
	waitFor("request of rank 0's open", func() bool { return proxy.Requests() > 0 })
	done1 := open(context.Background(), 1)
	waitFor("wait of rank 1 for the corpus rank 0 opens", func() bool { return refs() == 2 })
	cancel0()
	if err := result("rank 0's cancelled open", done0); !errors.Is(err, context.Canceled) {
		t.Fatalf("rank 0's open, cancelled: got %v, want context.Canceled", err)
	}
	proxy.SetFraction(0)
	if err := result("rank 1's open", done1); err != nil {
		t.Fatalf("rank 1's open, whose context did not end: %v", err)
	}
}

// objectCorpus is the S3 test server holding a small Megatron dataset at
// s3://bucket/corpus/web.
func objectCorpus(t *testing.T) *s3test.Server {
	srv := s3test.Start(t)
	srv.CreateBucket(t, "bucket")
	dir := t.TempDir()
	docs, _ := testcorpus.UniqueDocs(rand.New(rand.NewSource(1)), 200, 50, 1)
	testcorpus.Megatron(t, dir, "web", docs)
	srv.PutDir(t, "bucket", "corpus/", dir)
	return srv
}

// useStore points the test's environment (the store's credentials and
// endpoint) at endpoint, the server or a proxy in front of it.
func useStore(t *testing.T, srv *s3test.Server, endpoint string) {
	for _, kv := range srv.EnvFor(endpoint) {
		name, value, _ := strings.Cut(kv, "=")
		t.Setenv(name, value)
	}
}
