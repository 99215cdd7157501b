package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/objstore/s3test"
)

const block = 4096

// fixture is a server with one bucket holding one object of random bytes,
// and a store reaching it.
type fixture struct {
	srv   *s3test.Server
	data  []byte
	loc   objstore.Location
	store *objstore.Store
}

func newFixture(t *testing.T, size int, opts objstore.Options) *fixture {
	t.Helper()
	srv := s3test.Start(t)
	srv.SetEnv(t)
	srv.CreateBucket(t, "bucket")
	data := make([]byte, size)
	rand.New(rand.NewSource(int64(size))).Read(data)
	srv.Put(t, "bucket", "dir/obj.bin", data)
	if opts.BlockSize == 0 {
		opts.BlockSize = block
	}
	store, err := objstore.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return &fixture{srv: srv, data: data, loc: objstore.Location{Bucket: "bucket", Key: "dir/obj.bin"}, store: store}
}

func (f *fixture) open(t *testing.T) *objstore.Object {
	t.Helper()
	o, err := f.store.Open(context.Background(), f.loc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

// read holds [off, off+n), copies it out and releases it.
func read(t *testing.T, o *objstore.Object, off, n int64) []byte {
	t.Helper()
	if err := o.Hold(context.Background(), off, n); err != nil {
		t.Fatal(err)
	}
	defer o.Release(off, n)
	return bytes.Clone(o.Data()[off : off+n])
}

// TestFetchedOnce: eight readers of random ranges of one object get its
// bytes, and each byte is fetched once between them.
func TestFetchedOnce(t *testing.T) {
	f := newFixture(t, 10*block+123, objstore.Options{})
	o := f.open(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(g)))
			for range 200 {
				off := rng.Int63n(int64(len(f.data)))
				n := 1 + rng.Int63n(min(3*block, int64(len(f.data))-off))
				if got := read(t, o, off, n); !bytes.Equal(got, f.data[off:off+n]) {
					t.Errorf("bytes [%d, %d) differ", off, off+n)
					return
				}
			}
		}()
	}
	wg.Wait()
	st := f.store.Stats()
	if st.Gets > 11 || st.FetchedBytes != int64(len(f.data)) {
		t.Fatalf("11 blocks fetched in %d GETs, %d bytes (object %d bytes): want each byte once", st.Gets, st.FetchedBytes, len(f.data))
	}
	if st.Misses != 11 || st.Hits == 0 {
		t.Fatalf("lookups: %+v", st)
	}
}

// TestBudget: a cache of three blocks reading ten evicts the oldest, stays
// in its budget, fetches an evicted block again, and never evicts a block
// a read holds.
func TestBudget(t *testing.T) {
	f := newFixture(t, 10*block, objstore.Options{MemoryBytes: 3 * block})
	o := f.open(t)
	if err := o.Hold(context.Background(), 0, 1); err != nil { // block 0 stays held
		t.Fatal(err)
	}
	for i := int64(1); i < 10; i++ {
		if got := read(t, o, i*block, block); !bytes.Equal(got, f.data[i*block:(i+1)*block]) {
			t.Fatalf("block %d differs", i)
		}
		if st := f.store.Stats(); st.CachedBytes > 3*block {
			t.Fatalf("after block %d the cache holds %d bytes, budget %d", i, st.CachedBytes, 3*block)
		}
	}
	if got := o.Data()[0]; got != f.data[0] { // still held: still readable
		t.Fatalf("held byte 0 is %d, want %d", got, f.data[0])
	}
	o.Release(0, 1)
	if got := read(t, o, 1*block, 10); !bytes.Equal(got, f.data[block:block+10]) {
		t.Fatal("block 1, fetched again, differs")
	}
	st := f.store.Stats()
	if st.Evictions < 7 || st.Gets != 11 {
		t.Fatalf("want >= 7 evictions and 11 GETs (block 1 twice): %+v", st)
	}
}

// TestAheadAges: blocks fetched ahead and never read do not keep the
// cache from fetching ahead: when what is ahead fills half the budget, the
// oldest of it, once stale, makes room; fresh, it is kept.
func TestAheadAges(t *testing.T) {
	f := newFixture(t, 8*block, objstore.Options{MemoryBytes: 4 * block, StaleAhead: 200 * time.Millisecond})
	o := f.open(t)
	wait := func(bytes int64) {
		deadline := time.Now().Add(10 * time.Second)
		for f.store.Stats().FetchedBytes < bytes {
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %d bytes fetched ahead: %+v", bytes, f.store.Stats())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	o.Prefetch(0, 2*block) // never read
	wait(2 * block)
	o.Prefetch(4*block, 2*block) // refused: blocks 0 and 1 are fresh
	time.Sleep(300 * time.Millisecond)
	if st := f.store.Stats(); st.FetchedBytes != 2*block || st.Evictions != 0 {
		t.Fatalf("a prefetch evicted fresh blocks fetched ahead: %+v", st)
	}
	o.Prefetch(4*block, 2*block) // now they are stale
	wait(4 * block)
	if got := read(t, o, 4*block, 2*block); !bytes.Equal(got, f.data[4*block:6*block]) {
		t.Fatal("bytes differ")
	}
	if st := f.store.Stats(); st.Ahead != 2 || st.Misses != 0 || st.Evictions != 2 {
		t.Fatalf("want blocks 0 and 1 evicted for 4 and 5, read as fetched ahead: %+v", st)
	}
}

// TestPrefetch: blocks asked for ahead are fetched in the background (four
// in a row in one GET), and the read that comes for them finds them.
func TestPrefetch(t *testing.T) {
	f := newFixture(t, 8*block, objstore.Options{Concurrency: 4})
	o := f.open(t)
	o.Prefetch(2*block, 4*block)
	deadline := time.Now().Add(10 * time.Second)
	for f.store.Stats().FetchedBytes < 4*block {
		if time.Now().After(deadline) {
			t.Fatalf("prefetch of 4 blocks: %+v", f.store.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := read(t, o, 2*block, 4*block); !bytes.Equal(got, f.data[2*block:6*block]) {
		t.Fatal("prefetched bytes differ")
	}
	if st := f.store.Stats(); st.Ahead != 4 || st.Misses != 0 || st.Gets != 1 {
		t.Fatalf("want 4 blocks fetched ahead in one GET, then read, no miss: %+v", st)
	}
}

// TestReplaced: an object replaced after it was opened fails the reads of
// blocks not yet cached with ErrChanged, naming it; a reopen reads the new
// bytes.
func TestReplaced(t *testing.T) {
	f := newFixture(t, 2*block, objstore.Options{})
	o := f.open(t)
	read(t, o, 0, 10)
	f.srv.Put(t, "bucket", "dir/obj.bin", bytes.Repeat([]byte{7}, 2*block))
	err := o.Hold(context.Background(), block, 10)
	if !errors.Is(err, objstore.ErrChanged) || !strings.Contains(err.Error(), "s3://bucket/dir/obj.bin") {
		t.Fatalf("read of a replaced object: got %v", err)
	}
	// The store remembers the old ETag for a minute; a fresh one sees the new.
	store, err := objstore.New(objstore.Options{BlockSize: block})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	o2, err := store.Open(context.Background(), f.loc)
	if err != nil {
		t.Fatal(err)
	}
	defer o2.Close()
	if got := read(t, o2, block, 10); !bytes.Equal(got, bytes.Repeat([]byte{7}, 10)) {
		t.Fatalf("reopened object: %v", got)
	}
}

// TestMissing: a missing object is ErrNotFound, named.
func TestMissing(t *testing.T) {
	f := newFixture(t, block, objstore.Options{})
	_, err := f.store.Open(context.Background(), objstore.Location{Bucket: "bucket", Key: "nope"})
	if !errors.Is(err, objstore.ErrNotFound) || !strings.Contains(err.Error(), "s3://bucket/nope") {
		t.Fatalf("missing object: got %v", err)
	}
}

// TestDiskCache: with a cache directory the blocks live in files there,
// within the disk budget: the object's entry (its data and its journal)
// beside the directory's lock, nothing else (diskcache_test.go has the
// rest: restarts, versions, crashes).
func TestDiskCache(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, 3*block+5, objstore.Options{Dir: dir, DiskBytes: 2 * block})
	o := f.open(t)
	for i := range int64(4) {
		n := min(block, int64(len(f.data))-i*block)
		if got := read(t, o, i*block, n); !bytes.Equal(got, f.data[i*block:i*block+n]) {
			t.Fatalf("block %d differs", i)
		}
	}
	entry := filepath.Base(objstore.EntryOf(o))
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{entry + ".data", entry + ".log", "lock"}; !slices.Equal(names, want) {
		t.Fatalf("cache dir holds %v, want %v", names, want)
	}
	if st := f.store.Stats(); st.CachedBytes > 2*block || st.Evictions == 0 {
		t.Fatalf("disk budget: %+v", st)
	}
}

// TestRetriesGiveUp: a store whose server is gone fails a read after
// RetryFor, with an error naming the object and the attempts.
func TestRetriesGiveUp(t *testing.T) {
	f := newFixture(t, 2*block, objstore.Options{RetryFor: 500 * time.Millisecond})
	o := f.open(t)
	f.srv.Stop()
	err := o.Hold(context.Background(), 0, 10)
	if !errors.Is(err, objstore.ErrObject) || !strings.Contains(err.Error(), "s3://bucket/dir/obj.bin") || !strings.Contains(err.Error(), "attempts") {
		t.Fatalf("read with the server gone: got %v", err)
	}
	if st := f.store.Stats(); st.Retries == 0 {
		t.Fatalf("no retry counted: %+v", st)
	}
}

func TestLocation(t *testing.T) {
	for _, c := range []struct {
		path, prefix string
		within       bool
	}{
		{"s3://b/data/x.bin", "s3://b/data", true},
		{"s3://b/data/x.bin", "s3://b/data/", true},
		{"s3://b/database/x.bin", "s3://b/data", false},
		{"s3://b/x", "s3://b", true},
		{"s3://c/data/x", "s3://b/data", false},
		{"s3://b/data", "s3://b/data", true},
	} {
		l, err := objstore.Parse(c.path)
		if err != nil {
			t.Fatal(err)
		}
		p, err := objstore.Parse(c.prefix)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.Within(p); got != c.within {
			t.Errorf("%s within %s: %v, want %v", c.path, c.prefix, got, c.within)
		}
	}
	for _, bad := range []string{"s3://", "s3:///key", "/local", "s3://b*/x", "s3://b/data/../other", "s3://b/./x"} {
		if _, err := objstore.Parse(bad); !errors.Is(err, objstore.ErrInvalidURL) {
			t.Errorf("Parse(%q): got %v, want ErrInvalidURL", bad, err)
		}
	}
}

// TestRuns: a read of many absent blocks fetches them in one GET; one
// that finds some cached fetches only the runs of absent ones.
func TestRuns(t *testing.T) {
	f := newFixture(t, 12*block, objstore.Options{})
	o := f.open(t)
	read(t, o, 2*block, 1)
	read(t, o, 6*block, 1)
	if got := read(t, o, 0, 12*block); !bytes.Equal(got, f.data) {
		t.Fatal("bytes differ")
	}
	// Blocks 2 and 6 were cached: runs [0,1], [3,5], [7,11].
	if st := f.store.Stats(); st.Gets != 5 || st.FetchedBytes != 12*block {
		t.Fatalf("want 5 GETs of 12 blocks in all: %+v", st)
	}
}
