package objstore_test

import (
	"bytes"
	"context"
	"math/rand"
	"runtime"
	"sync"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
)

// TestHeldWhileEvicting: reads of blocks in the cache, through Hold and
// ReadAt, see the object's bytes while other reads evict blocks all the
// time: a block a read holds is never evicted (punched to zeros) under it,
// whichever chunk of the block table it is in (a cache of six blocks, an
// object of four chunks of 64, so chunks are dropped and made again and
// the table's recent chunks go stale).
func TestHeldWhileEvicting(t *testing.T) {
	const blocks = 4 * 64
	f := newFixture(t, blocks*block, objstore.Options{MemoryBytes: 6 * block})
	o := f.open(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(g)))
			p := make([]byte, 3*block)
			for range 150 {
				// Near a chunk's edge half the time: reads span two chunks.
				off := rng.Int63n(int64(len(f.data)) - 3*block)
				if rng.Intn(2) == 0 {
					off = int64(64*(1+rng.Intn(3)))*block - 1 - rng.Int63n(block)
				}
				n := 1 + rng.Int63n(2*block)
				want := f.data[off : off+n]
				if g%2 == 1 {
					if _, err := o.ReadAt(p[:n], off); err != nil {
						t.Error(err)
						return
					}
					if !bytes.Equal(p[:n], want) {
						t.Errorf("ReadAt of bytes [%d, %d) differs from the object", off, off+n)
						return
					}
					continue
				}
				if err := o.Hold(ctx, off, n); err != nil {
					t.Error(err)
					return
				}
				for range 3 { // the others evict meanwhile
					runtime.Gosched()
					if !bytes.Equal(o.Data()[off:off+n], want) {
						o.Release(off, n)
						t.Errorf("held bytes [%d, %d) changed under the read", off, off+n)
						return
					}
				}
				o.Release(off, n)
			}
		}()
	}
	wg.Wait()
	st := f.store.Stats()
	if st.Evictions < 100 {
		t.Fatalf("want many evictions: %+v", st)
	}
}
