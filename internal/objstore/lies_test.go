package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/objstore/s3test"
)

// objName is the fixture's object as the lying proxy names it.
const objName = "bucket/dir/obj.bin"

// liar is a server with s3://bucket/dir/obj.bin (random bytes), a lying
// proxy in front of it, and the environment that sends a store there.
type liar struct {
	srv   *s3test.Server
	proxy *s3test.FaultProxy
	data  []byte
	loc   objstore.Location
}

func newLiar(t *testing.T, size int) *liar {
	t.Helper()
	srv := s3test.Start(t)
	srv.CreateBucket(t, "bucket")
	data := make([]byte, size)
	rand.New(rand.NewSource(int64(size))).Read(data)
	srv.Put(t, "bucket", "dir/obj.bin", data)
	proxy := s3test.NewLyingProxy(t, srv)
	for _, kv := range srv.EnvFor(proxy.URL) {
		name, value, _ := strings.Cut(kv, "=")
		t.Setenv(name, value)
	}
	return &liar{srv: srv, proxy: proxy, data: data, loc: objstore.Location{Bucket: "bucket", Key: "dir/obj.bin"}}
}

// store is a new store reaching the server through the proxy.
func (l *liar) store(t *testing.T, opts objstore.Options) *objstore.Store {
	t.Helper()
	if opts.BlockSize == 0 {
		opts.BlockSize = block
	}
	s, err := objstore.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// wantErr fails unless err is each of kinds and its text has each of words.
func wantErr(t *testing.T, what string, err error, kinds []error, words ...string) {
	t.Helper()
	for _, k := range kinds {
		if !errors.Is(err, k) {
			t.Fatalf("%s: got %v, want %v", what, err, k)
		}
	}
	for _, w := range words {
		if !strings.Contains(fmt.Sprint(err), w) {
			t.Fatalf("%s: %v does not say %q", what, err, w)
		}
	}
	t.Logf("%s: %v", what, err)
}

// TestSizesBounded: a listing or HEAD that reports an object larger than
// 5 TiB, or of a negative size, is refused with an error naming the
// object, the size and the bound, before anything is made from it (a
// block table for 2^50 bytes made the daemon die of "out of memory").
func TestSizesBounded(t *testing.T) {
	l := newLiar(t, 2*block)
	ctx := context.Background()
	for _, c := range []struct {
		size int64
		list bool
	}{
		{1 << 50, false}, {1 << 62, false}, {objstore.MaxObjectSize + 1, false},
		{1 << 50, true}, {1 << 62, true}, {-1, true},
	} {
		l.proxy.SetLies(s3test.Lies{Sizes: map[string]int64{objName: c.size}})
		store := l.store(t, objstore.Options{})
		var err error
		if c.list {
			if _, err = store.List(ctx, "bucket", "dir/", false); err == nil {
				var o *objstore.Object
				if o, err = store.Open(ctx, l.loc); err == nil {
					o.Close()
				}
			}
		} else {
			_, err = store.Open(ctx, l.loc)
		}
		wantErr(t, fmt.Sprintf("size %d (listing %v)", c.size, c.list), err, []error{objstore.ErrObject, objstore.ErrBadAnswer},
			"s3://bucket/dir/obj.bin", fmt.Sprintf("size %d bytes", c.size), fmt.Sprint(int64(objstore.MaxObjectSize)))
	}
}

// TestLargeObjectCheap: opening an object of the largest legal size (the
// store says 5 TiB) costs no block table (it cost 1.3 GB at 64 KiB
// blocks); its reads, whose answers say another size, fail as a changed
// object, naming it.
func TestLargeObjectCheap(t *testing.T) {
	l := newLiar(t, 4*block)
	l.proxy.SetLies(s3test.Lies{Sizes: map[string]int64{objName: objstore.MaxObjectSize}})
	store := l.store(t, objstore.Options{BlockSize: 64 << 10})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	o, err := store.Open(context.Background(), l.loc)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 16<<20 {
		t.Fatalf("opening a 5 TiB object took %d bytes of heap", grew)
	}
	if o.Size() != objstore.MaxObjectSize || objstore.ChunksOf(o) != 0 {
		t.Fatalf("size %d, %d chunks of block table made before any read", o.Size(), objstore.ChunksOf(o))
	}
	for _, off := range []int64{0, 1 << 40} { // within the object's real bytes, and past them
		err = o.Hold(context.Background(), off, 10)
		wantErr(t, "read of an object whose size the store lied about", err, []error{objstore.ErrChanged},
			"s3://bucket/dir/obj.bin", fmt.Sprint(int64(objstore.MaxObjectSize)))
	}
	if n := objstore.ChunksOf(o); n != 0 {
		t.Fatalf("%d chunks of block table left after a failed read", n)
	}
}

// TestBlockTableFollowsUse: the block table of an object holds the chunks
// of the blocks in the cache, and drops a chunk once its blocks are
// evicted.
func TestBlockTableFollowsUse(t *testing.T) {
	f := newFixture(t, 200*block, objstore.Options{MemoryBytes: 2 * block})
	o := f.open(t)
	for _, i := range []int64{0, 70, 140} { // blocks of three chunks of 64
		if got := read(t, o, i*block, 10); !bytes.Equal(got, f.data[i*block:i*block+10]) {
			t.Fatalf("block %d differs", i)
		}
	}
	if n := objstore.ChunksOf(o); n != 2 {
		t.Fatalf("%d chunks made with blocks 70 and 140 cached, want 2", n)
	}
	for i := int64(0); i < 200; i++ {
		read(t, o, i*block, block)
		if n := objstore.ChunksOf(o); n > 2 {
			t.Fatalf("%d chunks made for a cache of 2 blocks", n)
		}
	}
}

// TestListingBounded: a listing that never ends (the same continuation
// token again, a new one forever, or none though it says it goes on), or
// one with more keys than the bound, is refused naming the prefix and the
// bound (it grew the daemon until it was killed).
func TestListingBounded(t *testing.T) {
	l := newLiar(t, block)
	l.srv.Put(t, "bucket", "dir/b.bin", []byte("b"))
	l.srv.Put(t, "bucket", "dir/c.bin", []byte("c"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, c := range []struct {
		lie   s3test.ListingLie
		opts  objstore.Options
		words []string
	}{
		{s3test.ListingRepeats, objstore.Options{}, []string{"page 2 gives the continuation token page 1 gave"}},
		{s3test.ListingEndless, objstore.Options{MaxListPages: 20}, []string{"more than 20 pages"}},
		{s3test.ListingNoToken, objstore.Options{}, []string{"gives no continuation token"}},
		{s3test.ListingTrue, objstore.Options{MaxListKeys: 2}, []string{"more than 2 keys"}},
	} {
		l.proxy.SetLies(s3test.Lies{Listing: c.lie})
		_, err := l.store(t, c.opts).List(ctx, "bucket", "dir/", true)
		wantErr(t, fmt.Sprintf("listing lie %d", c.lie), err, []error{objstore.ErrObject, objstore.ErrBadAnswer},
			append(c.words, "list s3://bucket/dir/")...)
	}
	l.proxy.SetLies(s3test.Lies{})
	if infos, err := l.store(t, objstore.Options{MaxListKeys: 3}).List(ctx, "bucket", "dir/", true); err != nil || len(infos) != 3 {
		t.Fatalf("a listing within its bounds: %d objects, %v", len(infos), err)
	}
}

// TestWrongAnswersRefused: a GET answered with the whole object (Range
// ignored), another range, or a body longer than asked is retried and then
// fails the read, naming the object, the range asked and what came back;
// nothing of it is read as the object's bytes (the batches differed from
// the local copy, 40 of 40).
func TestWrongAnswersRefused(t *testing.T) {
	l := newLiar(t, 4*block)
	store := l.store(t, objstore.Options{RetryFor: 300 * time.Millisecond})
	o, err := store.Open(context.Background(), l.loc)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	for _, c := range []struct {
		lie  s3test.Lies
		says string
	}{
		{s3test.Lies{IgnoreRange: true}, "status 200"},
		{s3test.Lies{ShiftRange: block}, `Content-Range "bytes 8192-12287/16384"`},
		{s3test.Lies{ShiftRange: 1}, `Content-Range "bytes 4097-8192/16384"`},
		{s3test.Lies{ExtraByte: true}, "a body longer than the 4096 bytes"},
	} {
		l.proxy.SetLies(c.lie)
		retries := store.Stats().Retries
		err := o.Hold(context.Background(), block, 10)
		if err == nil {
			o.Release(block, 10)
		}
		wantErr(t, fmt.Sprintf("read with lies %+v", c.lie), err, []error{objstore.ErrObject, objstore.ErrUnavailable},
			"s3://bucket/dir/obj.bin", "get 4096-8191", c.says)
		if store.Stats().Retries == retries {
			t.Fatalf("lies %+v: the wrong answer was not retried", c.lie)
		}
	}
	l.proxy.SetLies(s3test.Lies{})
	if got := read(t, o, block, block); !bytes.Equal(got, l.data[block:2*block]) {
		t.Fatal("the bytes read after the lies differ")
	}
}

// TestVersionPinned: an object is pinned to its ETag, or without one to its
// Last-Modified date: a GET answered by another version fails with
// ErrChanged even where the store ignores If-Match (a store without ETags
// served a replaced object's new bytes). A store that gives neither is
// refused at open unless AllowUnversioned; then the size is the pin.
func TestVersionPinned(t *testing.T) {
	l := newLiar(t, 2*block)
	l.srv.Put(t, "bucket", "dir/new.bin", bytes.Repeat([]byte{7}, 2*block)) // the same size
	l.srv.Put(t, "bucket", "dir/longer.bin", bytes.Repeat([]byte{8}, 3*block))
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(l.srv.Dir, "bucket", "dir", "obj.bin"), old, old); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	replaced := func(by string) map[string]string { return map[string]string{objName: "bucket/dir/" + by} }
	for _, c := range []struct {
		open, read s3test.Lies
		says       string
	}{
		{s3test.Lies{}, s3test.Lies{Replaced: replaced("new.bin"), IgnoreConditions: true}, "the answer's ETag"},
		{s3test.Lies{StripETag: true}, s3test.Lies{Replaced: replaced("new.bin"), IgnoreConditions: true, StripETag: true}, "the answer's Last-Modified"},
		{s3test.Lies{}, s3test.Lies{Replaced: replaced("new.bin")}, "412"}, // If-Match, honoured
	} {
		l.proxy.SetLies(c.open)
		o, err := l.store(t, objstore.Options{}).Open(ctx, l.loc)
		if err != nil {
			t.Fatal(err)
		}
		l.proxy.SetLies(c.read)
		err = o.Hold(ctx, 0, 10)
		wantErr(t, fmt.Sprintf("read of a replaced object, lies %+v", c.read), err, []error{objstore.ErrObject, objstore.ErrChanged},
			"s3://bucket/dir/obj.bin", c.says)
		o.Close()
	}

	unversioned := s3test.Lies{StripETag: true, StripLastModified: true}
	l.proxy.SetLies(unversioned)
	_, err := l.store(t, objstore.Options{}).Open(ctx, l.loc)
	wantErr(t, "open of an object with no version", err, []error{objstore.ErrObject, objstore.ErrUnversioned},
		"s3://bucket/dir/obj.bin", "--object-allow-unversioned")
	o, err := l.store(t, objstore.Options{AllowUnversioned: true}).Open(ctx, l.loc)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if got := read(t, o, 0, 10); !bytes.Equal(got, l.data[:10]) {
		t.Fatal("an unversioned object read other bytes")
	}
	unversioned.Replaced, unversioned.IgnoreConditions = replaced("longer.bin"), true
	l.proxy.SetLies(unversioned)
	wantErr(t, "read of an unversioned object replaced by a longer one", o.Hold(ctx, block, 10), []error{objstore.ErrChanged},
		"s3://bucket/dir/obj.bin", fmt.Sprintf("%d at open", 2*block))
}

// TestErrorKinds: the store's failures are told apart: refused
// credentials (ErrDenied), an object gone after it was opened
// (ErrChanged), a store past its retries (ErrUnavailable).
func TestErrorKinds(t *testing.T) {
	l := newLiar(t, 2*block)
	ctx := context.Background()
	store := l.store(t, objstore.Options{RetryFor: 300 * time.Millisecond})
	o, err := store.Open(ctx, l.loc)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if err := os.Remove(filepath.Join(l.srv.Dir, "bucket", "dir", "obj.bin")); err != nil {
		t.Fatal(err)
	}
	err = o.Hold(ctx, 0, 10)
	wantErr(t, "read of a deleted object", err, []error{objstore.ErrChanged}, "s3://bucket/dir/obj.bin", "gone (404)")
	if errors.Is(err, objstore.ErrNotFound) || errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("read of a deleted object: %v is not only ErrChanged", err)
	}

	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong-"+l.srv.SecretKey)
	_, err = l.store(t, objstore.Options{RetryFor: 300 * time.Millisecond}).Open(ctx, objstore.Location{Bucket: "bucket", Key: "dir/x"})
	wantErr(t, "open with a wrong secret", err, []error{objstore.ErrObject, objstore.ErrDenied}, "s3://bucket/dir/x", "403")
	if errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("open with a wrong secret: %v is retried as unavailable", err)
	}
}

// TestMappedBound: the objects mapped at once stay within MaxMappedBytes:
// objects no session reads are dropped to make room; past that an open is
// refused, naming the object and the bound.
func TestMappedBound(t *testing.T) {
	f := newFixture(t, 2*block, objstore.Options{MaxMappedBytes: 3 * block})
	f.srv.Put(t, "bucket", "dir/b.bin", make([]byte, 2*block))
	a := f.open(t)
	read(t, a, 0, 10) // cached: it stays after Close
	b := objstore.Location{Bucket: "bucket", Key: "dir/b.bin"}
	_, err := f.store.Open(context.Background(), b)
	wantErr(t, "open past the mapped bound", err, []error{objstore.ErrObject, objstore.ErrBudget}, "s3://bucket/dir/b.bin", fmt.Sprint(3*block))
	a.Close()
	o, err := f.store.Open(context.Background(), b)
	if err != nil {
		t.Fatalf("open once the other object is no longer read: %v", err)
	}
	o.Close()
}
