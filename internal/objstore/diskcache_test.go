package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
)

// diskStore is another store on the disk cache dir, closed at the end.
func diskStore(t *testing.T, dir string, budget int64) *objstore.Store {
	t.Helper()
	s, err := objstore.New(objstore.Options{BlockSize: block, Dir: dir, DiskBytes: budget})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// readAll opens loc in s, reads all of it and closes it; it returns the
// bytes and the object's entry in the cache directory.
func readAll(t *testing.T, s *objstore.Store, loc objstore.Location) ([]byte, string) {
	t.Helper()
	o, err := s.Open(context.Background(), loc)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	return read(t, o, 0, o.Size()), objstore.EntryOf(o)
}

// diskBytes is what the data files in dir take on disk.
func diskBytes(t *testing.T, dir string) int64 {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(dir, "*.data"))
	var n int64
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		n += info.Sys().(*syscall.Stat_t).Blocks * 512
	}
	return n
}

// TestDiskCacheRestart: a second store on the same directory reads what the
// first fetched with no GET, and a replaced object (another ETag) is
// fetched again whole, its old bytes never served.
func TestDiskCacheRestart(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, 5*block+7, objstore.Options{Dir: dir, DiskBytes: 64 * block})
	got, _ := readAll(t, f.store, f.loc)
	if !bytes.Equal(got, f.data) {
		t.Fatal("first read differs")
	}
	f.store.Close()

	s2 := diskStore(t, dir, 64*block)
	if got, _ := readAll(t, s2, f.loc); !bytes.Equal(got, f.data) {
		t.Fatal("read after the restart differs")
	}
	if st := s2.Stats(); st.Gets != 0 || st.FetchedBytes != 0 || st.Hits != 6 {
		t.Fatalf("after a restart the cached object was fetched again: %+v", st)
	}
	s2.Close()

	other := bytes.Repeat([]byte{7}, len(f.data))
	f.srv.Put(t, "bucket", "dir/obj.bin", other)
	s3 := diskStore(t, dir, 64*block)
	if got, _ := readAll(t, s3, f.loc); !bytes.Equal(got, other) {
		t.Fatal("a replaced object read old bytes from the disk cache")
	}
	if st := s3.Stats(); st.FetchedBytes != int64(len(other)) {
		t.Fatalf("a replaced object: want all its %d bytes fetched, got %+v", len(other), st)
	}
	if logs, _ := filepath.Glob(filepath.Join(dir, "*.log")); len(logs) != 1 {
		t.Fatalf("the old version's entry is left: %v", logs)
	}
}

// TestDiskCacheBudgetRestart: what a store finds on disk counts in its
// budget: a smaller budget at the next start removes the entries used
// longest ago, and reads stay within it.
func TestDiskCacheBudgetRestart(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, 4*block, objstore.Options{Dir: dir, DiskBytes: 64 * block})
	a, b := f.loc, objstore.Location{Bucket: "bucket", Key: "dir/b.bin"}
	f.srv.Put(t, "bucket", b.Key, f.data[:3*block])
	_, entryA := readAll(t, f.store, a)
	readAll(t, f.store, b)
	f.store.Close()
	// a was used an hour before b (the clock that dates files may be too
	// coarse to tell reads a millisecond apart).
	hourAgo := time.Now().Add(-time.Hour)
	if err := os.Chtimes(entryA+".log", hourAgo, hourAgo); err != nil {
		t.Fatal(err)
	}
	if n := diskBytes(t, dir); n < 7*block {
		t.Fatalf("the first store left %d bytes on disk, want 7 blocks", n)
	}

	s2 := diskStore(t, dir, 3*block)
	if st := s2.Stats(); st.CachedBytes != 3*block {
		t.Fatalf("want b's 3 blocks kept and a's removed at start: %+v", st)
	}
	if n := diskBytes(t, dir); n > 3*block {
		t.Fatalf("%d bytes on disk after the start, budget %d", n, 3*block)
	}
	readAll(t, s2, b)
	if st := s2.Stats(); st.FetchedBytes != 0 {
		t.Fatalf("b was kept, yet fetched: %+v", st)
	}
	oa, err := s2.Open(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	defer oa.Close()
	for i := int64(0); i < 4; i++ { // a block at a time: none held at once
		if got := read(t, oa, i*block, block); !bytes.Equal(got, f.data[i*block:(i+1)*block]) {
			t.Fatalf("a's block %d differs", i)
		}
	}
	if st := s2.Stats(); st.FetchedBytes != 4*block || st.CachedBytes > 3*block {
		t.Fatalf("want a fetched again within the budget: %+v", st)
	}
	if n := diskBytes(t, dir); n > 3*block {
		t.Fatalf("%d bytes on disk, budget %d", n, 3*block)
	}
}

// TestDiskCacheLocked: a second store on a directory in use is refused,
// naming the directory and the flag; once the first closes, it opens.
func TestDiskCacheLocked(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, block, objstore.Options{Dir: dir})
	_, err := objstore.New(objstore.Options{BlockSize: block, Dir: dir})
	if !errors.Is(err, objstore.ErrCacheInUse) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "--object-cache-dir") {
		t.Fatalf("a second store on one directory: got %v", err)
	}
	f.store.Close()
	diskStore(t, dir, 0)
}

// TestDiskCacheTorn: what a crash leaves is never served: a block whose
// bytes differ from its journal's CRC-32C (a write cut short, then lost),
// a block written with no record (a kill while its GET was under way) and
// a record cut short are fetched again, and nothing else is.
func TestDiskCacheTorn(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, 4*block, objstore.Options{Dir: dir, DiskBytes: 64 * block})
	o := f.open(t)
	read(t, o, 0, 3*block) // blocks 0, 1, 2
	entry := objstore.EntryOf(o)
	o.Close()
	f.store.Close()

	data, err := os.OpenFile(entry+".data", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer data.Close()
	zeros := make([]byte, block/2)
	if _, err := data.WriteAt(zeros, block+block/4); err != nil { // block 1 torn
		t.Fatal(err)
	}
	if _, err := data.WriteAt(bytes.Repeat([]byte{9}, block/3), 3*block); err != nil { // block 3 half written
		t.Fatal(err)
	}
	journal, err := os.OpenFile(entry+".log", os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	journal.Write([]byte{3, 0, 0, 0, 0, 0, 0}) // a record of block 3 cut short
	journal.Close()

	s2 := diskStore(t, dir, 64*block)
	if n := diskBytes(t, dir); n != 3*block {
		t.Fatalf("after the start %d bytes on disk, want the 3 blocks recorded (block 3's bytes given back)", n)
	}
	if got, _ := readAll(t, s2, f.loc); !bytes.Equal(got, f.data) {
		t.Fatal("torn blocks were served")
	}
	if st := s2.Stats(); st.FetchedBytes != 2*block {
		t.Fatalf("want blocks 1 and 3 fetched again, no other: %+v", st)
	}
	s2.Close()
	s3 := diskStore(t, dir, 64*block)
	readAll(t, s3, f.loc)
	if st := s3.Stats(); st.FetchedBytes != 0 {
		t.Fatalf("after the torn blocks were fetched again: %+v", st)
	}
}

// TestDiskCacheEntryOfOneLiveObject: an object replaced and then put back
// with its first bytes (the same ETag) while the first object is still
// open gets a file of its own: the first object's evictions punch holes
// in its own entry only, and the block the third object holds stays its
// bytes.
func TestDiskCacheEntryOfOneLiveObject(t *testing.T) {
	f := newFixture(t, 4*block, objstore.Options{Dir: t.TempDir(), DiskBytes: 2 * block})
	objstore.SetListedFor(f.store, 0) // every open asks the server
	first := f.data
	o1 := f.open(t)
	read(t, o1, 0, block)
	other := make([]byte, 4*block)
	rand.New(rand.NewSource(99)).Read(other)
	f.srv.Put(t, "bucket", "dir/obj.bin", other)
	o2, err := f.store.Open(context.Background(), f.loc)
	if err != nil {
		t.Fatal(err)
	}
	defer o2.Close()
	f.srv.Put(t, "bucket", "dir/obj.bin", first) // the first bytes again: the first ETag
	o3, err := f.store.Open(context.Background(), f.loc)
	if err != nil {
		t.Fatal(err)
	}
	defer o3.Close()
	if o3 == o1 {
		t.Fatal("the open after the object was replaced gave the replaced object")
	}
	if got := read(t, o3, 0, block); !bytes.Equal(got, first[:block]) {
		t.Fatal("block 0 of the object put back is not its bytes")
	}
	read(t, o3, block, block) // a 2-block budget: evicts o1's block 0, the oldest
	if o3.HoldCached(0, block) {
		got := append([]byte(nil), o3.Data()[:block]...)
		o3.Release(0, block)
		if !bytes.Equal(got, first[:block]) {
			t.Fatalf("block 0, held as present, is not the object's bytes (all zeros: %v)", bytes.Count(got, []byte{0}) == len(got))
		}
	}
	o1.Close()
	if got := read(t, o3, 0, block); !bytes.Equal(got, first[:block]) {
		t.Fatal("after the replaced object closed, block 0 of the object put back is not its bytes")
	}
}
