package objstore_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
)

// TestHoldCached: HoldCached holds only what the cache has, fetching
// nothing: false (and no GET) for a range with an absent block; true for
// a range held before, whose bytes it keeps until Release, with the block
// counted a hit.
func TestHoldCached(t *testing.T) {
	f := newFixture(t, 4*block, objstore.Options{})
	o := f.open(t)
	if o.HoldCached(block+10, 20) {
		t.Fatal("HoldCached held a range of an absent block")
	}
	if st := f.store.Stats(); st.Gets != 0 {
		t.Fatalf("HoldCached of an absent block made %d GETs, want none", st.Gets)
	}
	read(t, o, block, block) // block 1 cached, no longer held
	if o.HoldCached(block, block+1) {
		t.Fatal("HoldCached held a range running into block 2, absent")
	}
	before := f.store.Stats()
	if !o.HoldCached(block+10, 20) {
		t.Fatal("HoldCached did not hold a range of a cached block")
	}
	if got, want := o.Data()[block+10:block+30], f.data[block+10:block+30]; !bytes.Equal(got, want) {
		t.Fatalf("bytes held: %v, want %v", got, want)
	}
	o.Release(block+10, 20)
	after := f.store.Stats()
	if after.Gets != before.Gets || after.Hits != before.Hits+1 {
		t.Fatalf("HoldCached of a cached block: GETs %d -> %d, hits %d -> %d; want no GET and one hit",
			before.Gets, after.Gets, before.Hits, after.Hits)
	}
	if !o.HoldCached(0, 0) {
		t.Fatal("HoldCached of no bytes: want true")
	}
}

// TestHoldCachedAheadBlockJoinsTheLRU: a block fetched ahead and first read
// by HoldCached is, once released, the least recently read block like any
// other: the next eviction takes it, as it does after Hold.
func TestHoldCachedAheadBlockJoinsTheLRU(t *testing.T) {
	for _, cached := range []bool{true, false} {
		f := newFixture(t, 8*block, objstore.Options{MemoryBytes: 4 * block, Concurrency: 1, StaleAhead: time.Hour})
		o := f.open(t)
		o.Prefetch(0, block)
		deadline := time.Now().Add(10 * time.Second)
		for !o.HoldCached(0, 1) { // the prefetch lands
			if time.Now().After(deadline) {
				t.Fatal("the prefetch of block 0 did not land")
			}
			time.Sleep(5 * time.Millisecond)
		}
		o.Release(0, 1)
		if !cached {
			read(t, o, 0, 1) // Hold's path, for comparison
		}
		for k := int64(1); k <= 4; k++ {
			read(t, o, k*block, block) // the fourth needs an eviction
		}
		kept0 := o.HoldCached(0, 1)
		if kept0 {
			o.Release(0, 1)
		}
		if kept0 {
			t.Errorf("HoldCached first (%v): block 0, read first, outlived the eviction of a 4-block cache", cached)
		}
	}
}
