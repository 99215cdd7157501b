package objstore_test

import (
	"bytes"
	"testing"

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
