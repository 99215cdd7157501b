package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
)

// restored fills a disk cache with all of an object of n blocks and
// closes its store: the next store on dir has its blocks stored, each
// checked at its first read.
func restored(t *testing.T, n int64) (*fixture, string) {
	t.Helper()
	dir := t.TempDir()
	f := newFixture(t, int(n*block), objstore.Options{Dir: dir, DiskBytes: 1024 * block})
	if got, _ := readAll(t, f.store, f.loc); !bytes.Equal(got, f.data) {
		t.Fatal("first read differs")
	}
	f.store.Close()
	return f, dir
}

// onlyEntry is the path of the one entry in dir, less ".log" or ".data".
func onlyEntry(t *testing.T, dir string) string {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(logs) != 1 {
		t.Fatalf("entries in %s: %v", dir, logs)
	}
	return strings.TrimSuffix(logs[0], ".log")
}

// TestDiskCacheCloseDuringCheck: a store closed while a read checks a
// block kept from before (its CRC-32C) makes that read fail with
// ErrObject; the check does not read the mapping Close unmaps.
func TestDiskCacheCloseDuringCheck(t *testing.T) {
	f, dir := restored(t, 8)
	s, err := objstore.New(objstore.Options{BlockSize: block, Dir: dir, DiskBytes: 1024 * block})
	if err != nil {
		t.Fatal(err)
	}
	o, err := s.Open(context.Background(), f.loc)
	if err != nil {
		t.Fatal(err)
	}
	checking, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	objstore.SetDiskHook(s, func(step string) {
		if step == "check" {
			once.Do(func() { close(checking); <-resume })
		}
	})
	held := make(chan error, 1)
	go func() { held <- o.Hold(context.Background(), 0, 8*block) }()
	<-checking
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	close(resume)
	if err := <-held; !errors.Is(err, objstore.ErrObject) {
		t.Fatalf("a read whose check the store's Close interrupted: got %v, want ErrObject", err)
	}
}

// TestDiskCacheCloseDuringChecks: readers checking the blocks of an object
// kept from before (of 1 MiB: a check takes a while) while the store
// closes, many times over: each read ends whole or with an error, none
// faults, and -race sees no race.
func TestDiskCacheCloseDuringChecks(t *testing.T) {
	const bs, n = 1 << 20, 16
	dir := t.TempDir()
	f := newFixture(t, bs*n, objstore.Options{BlockSize: bs, Dir: dir, DiskBytes: 2 * n * bs})
	readAll(t, f.store, f.loc)
	f.store.Close()
	for round := range 10 {
		s, err := objstore.New(objstore.Options{BlockSize: bs, Dir: dir, DiskBytes: 2 * n * bs})
		if err != nil {
			t.Fatal(err)
		}
		o, err := s.Open(context.Background(), f.loc)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := int64(g); k < n; k += 4 {
					err := o.Hold(context.Background(), k*bs, bs)
					if err != nil {
						if !errors.Is(err, objstore.ErrObject) {
							t.Errorf("a read as the store closed: %v, want ErrObject", err)
						}
						return
					}
					o.Release(k*bs, bs)
				}
			}()
		}
		time.Sleep(time.Duration(round%5) * time.Millisecond)
		s.Close()
		wg.Wait()
	}
}

// TestDiskCachePrefetchStored: after a restart, Prefetch has the blocks
// kept from before checked ahead of their reads, so that HoldCached (which
// never waits) finds them, with no GET; one whose bytes were damaged is
// fetched again.
func TestDiskCachePrefetchStored(t *testing.T) {
	f, dir := restored(t, 8)
	data, err := os.OpenFile(onlyEntry(t, dir)+".data", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := data.WriteAt(bytes.Repeat([]byte{9}, 10), 3*block+5); err != nil { // block 3 damaged
		t.Fatal(err)
	}
	data.Close()
	s := diskStore(t, dir, 1024*block)
	o, err := s.Open(context.Background(), f.loc)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if o.HoldCached(0, 8*block) {
		t.Fatal("HoldCached held blocks not yet checked")
	}
	o.Prefetch(0, 8*block)
	deadline := time.Now().Add(10 * time.Second)
	for !o.HoldCached(0, 8*block) {
		if time.Now().After(deadline) {
			t.Fatal("blocks kept from before and prefetched are not held by HoldCached")
		}
		time.Sleep(5 * time.Millisecond)
	}
	got := bytes.Clone(o.Data()[:8*block])
	o.Release(0, 8*block)
	if !bytes.Equal(got, f.data) {
		t.Fatal("the blocks checked ahead are not the object's bytes")
	}
	if st := s.Stats(); st.FetchedBytes != block || st.Ahead != 8 {
		t.Fatalf("want the damaged block alone fetched again and the 8 counted as read ahead: %+v", st)
	}
}
