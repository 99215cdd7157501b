package objstore_test

import (
	"bytes"
	"context"
	"errors"
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
