package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/objstore/s3test"
)

// throttledObject is an object opened through a proxy that then refuses
// every request, from a store that retries for 10 minutes: only a context
// or the store's closing ends a read of it within a test.
func throttledObject(t *testing.T) (*s3test.FaultProxy, *objstore.Store, *objstore.Object, []byte) {
	t.Helper()
	l := newLiar(t, 4*block)
	store := l.store(t, objstore.Options{RetryFor: 10 * time.Minute})
	o, err := store.Open(context.Background(), l.loc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	l.proxy.SetFraction(1)
	return l.proxy, store, o, l.data
}

// until polls ok, failing the test only if it never holds (a hang, not a
// timing).
func until(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); !ok(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s", what)
		}
	}
}

// result is what done gives, failing the test if it never does.
func result(t *testing.T, what string, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s still waits on the store", what)
		return nil
	}
}

// TestHoldOutlivesOtherReader: a read waiting for a block that another
// read is fetching is not failed when that other read's context ends (a
// session stopping): it fetches the block itself.
func TestHoldOutlivesOtherReader(t *testing.T) {
	proxy, _, o, data := throttledObject(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, second := make(chan error, 1), make(chan error, 1)
	go func() { first <- o.Hold(ctx, block, 10) }()
	until(t, "request of the first read", func() bool { return proxy.Requests() > 0 })
	go func() { second <- o.Hold(context.Background(), block, 10) }()
	until(t, "wait of the second read for the first's fetch", func() bool { return objstore.WaitingOn(o) == 1 })
	cancel()
	if err := result(t, "the cancelled read", first); !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled read: got %v, want context.Canceled", err)
	}
	proxy.SetFraction(0)
	if err := result(t, "the other read", second); err != nil {
		t.Fatalf("the read whose context did not end: %v", err)
	}
	defer o.Release(block, 10)
	if !bytes.Equal(o.Data()[block:block+10], data[block:block+10]) {
		t.Fatal("the bytes read differ")
	}
}

// TestReadAtEndsWithStore: a ReadAt (which takes no context) waiting on a
// store that throttles ends when the store closes, not after the retries
// (it read with context.Background()).
func TestReadAtEndsWithStore(t *testing.T) {
	proxy, store, o, _ := throttledObject(t)
	done := make(chan error, 1)
	go func() {
		_, err := o.ReadAt(make([]byte, 10), block)
		done <- err
	}()
	until(t, "request of the read", func() bool { return proxy.Requests() > 0 })
	store.Close()
	err := result(t, "the read", done)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "s3://bucket/dir/obj.bin") {
		t.Fatalf("a read as the store closed: got %v, want context.Canceled naming the object", err)
	}
}
