package objstore_test

import (
	"bytes"
	"context"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/objstore/s3test"
)

// TestCloseLeavesNoConnections: a store's close leaves none of its
// connections open, not even that of a HEAD which ends after the close
// (the store is 300 ms away): its transport kept it, idle, for 90 s,
// with the transport's buffers and CA bundle.
func TestCloseLeavesNoConnections(t *testing.T) {
	srv := s3test.Start(t)
	srv.CreateBucket(t, "bucket")
	srv.Put(t, "bucket", "obj", []byte("some bytes"))
	proxy := s3test.NewFaultProxy(t, srv.Endpoint, 0, 1)
	for _, kv := range srv.EnvFor(proxy.URL) {
		name, value, _ := strings.Cut(kv, "=")
		t.Setenv(name, value)
	}
	before := readLoops(t)
	store, err := objstore.New(objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	proxy.SetDelay(300 * time.Millisecond)
	headed := make(chan error, 1)
	go func() {
		_, err := store.Head(context.Background(), objstore.Location{Bucket: "bucket", Key: "obj"})
		headed <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); proxy.Requests() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the HEAD never reached the store")
		}
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-headed:
		t.Logf("the HEAD, ended after the close: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("the HEAD of a closed store still runs 5 s after its close: want it to end at once (no retries)")
	}
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n := readLoops(t)
		if n <= before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections of the closed store are open (%d before it), want none", n-before, before)
		}
	}
}

// readLoops counts the goroutines reading a client connection of the
// process's HTTP transports.
func readLoops(t *testing.T) int {
	t.Helper()
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 2); err != nil {
		t.Fatal(err)
	}
	return strings.Count(b.String(), "net/http.(*persistConn).readLoop(")
}
