package objstore_test

import (
	"runtime"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
)

// TestFetchAllocates: a GET of a block allocates far less than the 256 KiB
// it is copied through, which is reused: a buffer made per GET was most of
// what the daemon allocated while fetching, and its peak memory grew with
// the GETs made between collections.
func TestFetchAllocates(t *testing.T) {
	const blocks = 64
	f := newFixture(t, blocks*block, objstore.Options{MemoryBytes: 2 * block, Concurrency: 1})
	o := f.open(t)
	read(t, o, 0, block) // the client's first request made
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := int64(1); i < blocks; i++ {
		read(t, o, i*block, 1)
	}
	runtime.ReadMemStats(&after)
	gets := f.store.Stats().Gets - 1
	perGet := (after.TotalAlloc - before.TotalAlloc) / uint64(gets)
	t.Logf("%d GETs of %d-byte blocks: %d bytes allocated a GET", gets, block, perGet)
	if gets < blocks/2 || perGet >= 128<<10 {
		t.Errorf("%d GETs, %d bytes allocated a GET; want each a GET of its own and well under the 256 KiB copy buffer", gets, perGet)
	}
}
