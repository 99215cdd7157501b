package objstore_test

import (
	"math/rand"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/objstore/s3test"
)

// BenchmarkHoldRelease is the cache's bookkeeping of one warm read alone:
// Hold and Release of 8 KiB at random offsets of a 64 MiB object in the
// cache, in memory, with the CPU's caches warm (no copy between).
func BenchmarkHoldRelease(b *testing.B) {
	const size = 64 << 20
	srv := s3test.Start(b)
	srv.SetEnv(b)
	srv.CreateBucket(b, "bench")
	srv.Put(b, "bench", "hold.bin", make([]byte, size))
	store, err := objstore.New(objstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	o, err := store.Open(b.Context(), objstore.Location{Bucket: "bench", Key: "hold.bin"})
	if err != nil {
		b.Fatal(err)
	}
	defer o.Close()
	if _, err := o.ReadAt(make([]byte, size), 0); err != nil {
		b.Fatal(err)
	}
	offs := make([]int64, 4096)
	rng := rand.New(rand.NewSource(1))
	for k := range offs {
		offs[k] = rng.Int63n(size - 8<<10)
	}
	b.ResetTimer()
	for k := range b.N {
		off := offs[k%len(offs)]
		if err := o.Hold(b.Context(), off, 8<<10); err != nil {
			b.Fatal(err)
		}
		o.Release(off, 8<<10)
	}
}
