package objstore_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/objstore/s3test"
)

// TestListingBytesBounded: a store whose listing goes on with pages of
// 1,000 keys of 1 KiB each is refused once the keys and ETags pass
// MaxListBytes, naming the prefix and the bound, having allocated a small
// multiple of the bound (within the key and page bounds alone, such a
// listing held a GiB of keys and as much again in the store's memory of it).
func TestListingBytesBounded(t *testing.T) {
	l := newLiar(t, block)
	l.proxy.SetLies(s3test.Lies{Listing: s3test.ListingEndless, LongKeys: objstore.MaxKeyBytes})
	const bound = 2 << 20
	// 50 pages (50 MB of keys) is as far as the listing may go without the
	// byte bound, so that the test fails quickly without it.
	store := l.store(t, objstore.Options{MaxListBytes: bound, MaxListPages: 50})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	infos, err := store.List(context.Background(), "bucket", "dir/", true)
	runtime.ReadMemStats(&after)
	// The proxy's pages (1 MB each, made in this process) and the SDK's
	// parse of them are counted too: a page costs several MB.
	alloc := after.TotalAlloc - before.TotalAlloc
	if alloc > 64<<20 {
		t.Fatalf("a listing to be refused at %d bytes of keys allocated %d bytes (%v)", bound, alloc, err)
	}
	t.Logf("allocated %d bytes", alloc)
	wantErr(t, "listing of long keys", err, []error{objstore.ErrObject, objstore.ErrBadAnswer},
		"list s3://bucket/dir/", fmt.Sprintf("more than %d bytes of keys and ETags", bound))
	if infos != nil {
		t.Fatalf("a refused listing gave %d objects", len(infos))
	}
	if n, b := objstore.ListedOf(store); n != 0 || b != 0 {
		t.Fatalf("a refused listing left %d objects (%d bytes) remembered", n, b)
	}
}

// TestListedBounded: what the store remembers of listings (to spare a
// HEAD per object at open) holds at most what one listing may, the newest
// first, and is forgotten after its time without another listing (it
// grew with every listing of the last minute, and was pruned only by the
// next listing).
func TestListedBounded(t *testing.T) {
	l := newLiar(t, block)
	for _, k := range []string{"a/1.bin", "a/2.bin", "b/1.bin", "b/2.bin", "b/3.bin"} {
		l.srv.Put(t, "bucket", k, []byte(k))
	}
	ctx := context.Background()
	store := l.store(t, objstore.Options{MaxListKeys: 3})
	for _, prefix := range []string{"a/", "b/"} {
		if _, err := store.List(ctx, "bucket", prefix, true); err != nil {
			t.Fatal(err)
		}
		if n, _ := objstore.ListedOf(store); n > 3 {
			t.Fatalf("after listing %s: %d objects remembered, more than the 3 of a listing", prefix, n)
		}
	}
	// The listing of b/ is remembered whole: opening its objects makes no HEAD.
	if n, b := objstore.ListedOf(store); n != 3 || b == 0 {
		t.Fatalf("%d objects remembered (%d bytes), want the 3 of b/", n, b)
	}
	heads := store.Stats().Requests
	o, err := store.Open(ctx, objstore.Location{Bucket: "bucket", Key: "b/2.bin"})
	if err != nil {
		t.Fatal(err)
	}
	o.Close()
	if got := store.Stats().Requests; got != heads {
		t.Fatalf("opening an object just listed made %d requests", got-heads)
	}
	// Forgotten without another listing, by a store whose listings stand
	// for 50 ms; the hang guard is not a timing.
	store = l.store(t, objstore.Options{MaxListKeys: 3})
	objstore.SetListedFor(store, 50*time.Millisecond)
	if _, err := store.List(ctx, "bucket", "b/", true); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		n, b := objstore.ListedOf(store)
		if n == 0 && b == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d objects (%d bytes) still remembered 30 s after their listing", n, b)
		}
	}
	heads = store.Stats().Heads
	if o, err = store.Open(ctx, objstore.Location{Bucket: "bucket", Key: "b/1.bin"}); err != nil {
		t.Fatal(err)
	}
	o.Close()
	if store.Stats().Heads == heads {
		t.Fatal("an object whose listing was forgotten was opened without a HEAD")
	}
}
