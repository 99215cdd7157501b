package objstore_test

import (
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
)

// TestReadAhead: hints that continue one another a block at a time (a
// shard reading a run in order, hinting 8 blocks ahead of its reads) are
// read ahead in fewer, larger GETs, and every block read is fetched once;
// hints at random blocks are fetched as hinted, nothing beside them.
func TestReadAhead(t *testing.T) {
	const blocks = 256
	for _, sequential := range []bool{true, false} {
		// A cache of 1,024 blocks: windows of up to 16 (a 64th of it).
		f := newFixture(t, blocks*block, objstore.Options{MemoryBytes: 1024 * block, Concurrency: 4, StaleAhead: time.Hour})
		o := f.open(t)
		start := time.Now()
		at := func(k int64) int64 {
			if sequential {
				return k
			}
			return (k * 97) % blocks // 72 distinct blocks, none next to the one before
		}
		for k := int64(0); k < 8; k++ {
			o.Prefetch(at(k)*block, block)
		}
		for k := int64(0); k < 64; k++ {
			o.Prefetch(at(k+8)*block, block)
			read(t, o, at(k)*block, block)
		}
		hinted := int64(72)
		st := f.store.Stats()
		if sequential {
			if st.Gets > hinted/3 || st.FetchedBytes > (hinted+16)*block {
				t.Errorf("%d blocks hinted in order: %d GETs, %d bytes; want a third as many GETs as blocks and at most a window more than them", hinted, st.Gets, st.FetchedBytes)
			}
		} else if st.FetchedBytes != st.Gets*block || st.Gets < 64 || st.Gets > hinted {
			t.Errorf("%d random blocks hinted, 64 read: %d bytes fetched in %d GETs, want a block a GET, none beside those hinted", hinted, st.FetchedBytes, st.Gets)
		}
		t.Logf("sequential %v: %d GETs, %d blocks fetched, %v", sequential, st.Gets, st.FetchedBytes/block, time.Since(start))
	}
}
