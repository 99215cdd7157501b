package objstore_test

import (
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
)

// TestGatherHints: hints that continue one another (a shard reading a run
// in order, hinting 16 blocks ahead of its reads each time it moves a
// block) are fetched in fewer, larger GETs, nothing but the hinted blocks,
// each once; hints of random blocks are fetched as hinted, a GET each.
func TestGatherHints(t *testing.T) {
	const blocks, depth = 256, 16
	for _, sequential := range []bool{true, false} {
		f := newFixture(t, blocks*block, objstore.Options{MemoryBytes: blocks * block, Concurrency: 4, StaleAhead: time.Hour})
		o := f.open(t)
		for k := int64(0); k < 64; k++ {
			if sequential {
				o.Prefetch(k*block, depth*block)
				read(t, o, k*block, block)
				continue
			}
			i := (k * 97) % blocks // 64 distinct blocks, none next to the one before
			o.Prefetch(i*block, block)
			read(t, o, i*block, block)
		}
		st := f.store.Stats()
		t.Logf("sequential %v: %d GETs, %d blocks", sequential, st.Gets, st.FetchedBytes/block)
		if sequential {
			// 64 moves of a block: a GET each were the hints queued as
			// they come; gathered, a GET each quarter of the depth.
			if st.Gets > 64/(depth/4)+4 || st.FetchedBytes < 64*block || st.FetchedBytes > (64+depth)*block {
				t.Errorf("hints in order: %d GETs, %d bytes; want about one GET per %d blocks, and no block past the last hint", st.Gets, st.FetchedBytes, depth/4)
			}
		} else if st.Gets != 64 || st.FetchedBytes != 64*block {
			t.Errorf("64 random blocks hinted: %d bytes fetched in %d GETs, want the blocks, a GET each", st.FetchedBytes, st.Gets)
		}
	}
}
