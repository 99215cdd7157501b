package objstore_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/objstore/s3test"
)

// TestFetchAllocates: a GET of a block allocates far less than the 256 KiB
// it is copied through, which is reused: a buffer made per GET was most of
// what the daemon allocated while fetching, and its peak memory grew with
// the GETs made between collections.
func TestFetchAllocates(t *testing.T) {
	const blocks = 64
	f := newFixture(t, blocks*block, objstore.Options{MemoryBytes: 2 * block, Concurrency: 1})
	o := f.open(t)
	read(t, o, 0, block) // the client's first request made
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := int64(1); i < blocks; i++ {
		read(t, o, i*block, 1)
	}
	runtime.ReadMemStats(&after)
	gets := f.store.Stats().Gets - 1
	perGet := (after.TotalAlloc - before.TotalAlloc) / uint64(gets)
	t.Logf("%d GETs of %d-byte blocks: %d bytes allocated a GET", gets, block, perGet)
	if gets < blocks/2 || perGet >= 128<<10 {
		t.Errorf("%d GETs, %d bytes allocated a GET; want each a GET of its own and well under the 256 KiB copy buffer", gets, perGet)
	}
}

// TestFetchBufferOnlyForBody: a GET takes its copy buffer once its answer
// has come, for the copy of its body: GETs waiting for their answers (a
// store 300 ms away) hold none. Taken for the whole request, the buffers
// of the GETs in flight were live through the store's latency (2 MiB with
// 32 fetchers), and the collector's goal doubled them.
func TestFetchBufferOnlyForBody(t *testing.T) {
	const gets = 8
	srv := s3test.Start(t)
	srv.CreateBucket(t, "bucket")
	srv.Put(t, "bucket", "slow.bin", make([]byte, 2*gets*block))
	proxy := s3test.NewFaultProxy(t, srv.Endpoint, 0, 1)
	for _, kv := range srv.EnvFor(proxy.URL) {
		name, value, _ := strings.Cut(kv, "=")
		t.Setenv(name, value)
	}
	store, err := objstore.New(objstore.Options{BlockSize: block, MemoryBytes: 4 * gets * block, Concurrency: gets})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	o, err := store.Open(context.Background(), objstore.Location{Bucket: "bucket", Key: "slow.bin"})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	proxy.SetDelay(300 * time.Millisecond)
	before := proxy.Requests()
	for i := range int64(gets) {
		o.Prefetch(2*i*block, block) // blocks apart: a GET each
	}
	for deadline := time.Now().Add(5 * time.Second); proxy.Requests()-before < gets; {
		if time.Now().After(deadline) {
			t.Fatalf("%d GETs reached the store, want %d", proxy.Requests()-before, gets)
		}
		time.Sleep(time.Millisecond)
	}
	if out := objstore.CopyBuffersOut(); out != 0 {
		t.Fatalf("%d GETs waiting for their answers hold %d copy buffers, want none", gets, out)
	}
	for i := range int64(gets) {
		read(t, o, 2*i*block, block)
	}
	if out := objstore.CopyBuffersOut(); out != 0 {
		t.Fatalf("after the GETs, %d copy buffers are out, want none", out)
	}
}
