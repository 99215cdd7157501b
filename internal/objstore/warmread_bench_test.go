package objstore_test

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/objstore/s3test"
)

// BenchmarkWarmRead compares a read of a block in the cache (Hold, copy,
// Release, as the format readers do) with the same read of the same bytes
// in a local file mapped (a copy), in one run: the cache in memory and in
// --object-cache-dir, reads of 4 KiB to 64 KiB at random offsets, by 1 and
// 8 readers at once. It reports each rate and their ratio (cache/local;
// the issue asks >= 0.8), each from the median of many short turns read
// both ways alternately. Run:
//
//	DATALOADERD_S3_SERVER=/work/main/.tools/versitygw go test -run '^$' -bench WarmRead -benchtime 1x ./internal/objstore
func BenchmarkWarmRead(b *testing.B) {
	const size = 64 << 20
	srv := s3test.Start(b)
	srv.SetEnv(b)
	srv.CreateBucket(b, "bench")
	data := make([]byte, size)
	rand.New(rand.NewSource(1)).Read(data)
	srv.Put(b, "bench", "warm.bin", data)
	local := filepath.Join(b.TempDir(), "warm.bin")
	if err := os.WriteFile(local, data, 0o600); err != nil {
		b.Fatal(err)
	}
	lf, err := os.Open(local)
	if err != nil {
		b.Fatal(err)
	}
	defer lf.Close()
	mapping, err := unix.Mmap(int(lf.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Munmap(mapping)
	loc := objstore.Location{Bucket: "bench", Key: "warm.bin"}
	for _, where := range []string{"memory", "disk"} {
		opts := objstore.Options{}
		if where == "disk" {
			opts = objstore.Options{Dir: benchCacheDir(b), DiskBytes: 2 * size}
		}
		store, err := objstore.New(opts)
		if err != nil {
			b.Fatal(err)
		}
		o, err := store.Open(b.Context(), loc)
		if err != nil {
			b.Fatal(err)
		}
		p := make([]byte, size)
		if _, err := o.ReadAt(p, 0); err != nil { // the cache filled
			b.Fatal(err)
		}
		copy(p, mapping) // the local file in the page cache and mapped
		for _, n := range []int{4 << 10, 8 << 10, 64 << 10} {
			for _, readers := range []int{1, 8} {
				b.Run(fmt.Sprintf("%s/read=%dKiB/readers=%d", where, n>>10, readers), func(b *testing.B) {
					cached := func(off int64, dst []byte) {
						if err := o.Hold(b.Context(), off, int64(len(dst))); err != nil {
							panic(err)
						}
						copy(dst, o.Data()[off:])
						o.Release(off, int64(len(dst)))
					}
					plain := func(off int64, dst []byte) { copy(dst, mapping[off:]) }
					held := func(off int64, dst []byte) { // the cache's bookkeeping alone
						if err := o.Hold(b.Context(), off, int64(len(dst))); err != nil {
							panic(err)
						}
						o.Release(off, int64(len(dst)))
					}
					for range b.N {
						c, l, h := timeReads(readers, n, size, cached, plain, held)
						b.ReportMetric(float64(h.Nanoseconds())*float64(n)/warmBytes, "hold-ns/read")
						b.ReportMetric(l.Seconds()/c.Seconds(), "cache/local")
						b.ReportMetric(warmBytes/c.Seconds()/1e9, "cache-GB/s")
						b.ReportMetric(warmBytes/l.Seconds()/1e9, "local-GB/s")
					}
				})
			}
		}
		o.Close()
		store.Close()
	}
}

// warmBytes is what the readers of BenchmarkWarmRead read each way, in
// turns: all readers warmTurn reads each through the cache, then the same
// from the local file (the same offsets), then the other way round, so
// that the machine's other work slows both alike.
const (
	warmBytes = 1 << 30
	warmTurn  = 64
)

// timeReads has readers goroutines read warmBytes between them with cached
// and with plain (and held, the bookkeeping alone), n bytes at a time at
// random offsets, in turns; it returns the time each way would take at
// its median turn: on a shared machine a turn the scheduler interrupts
// (milliseconds, against tens of microseconds) is left out, as it falls
// on either way by chance.
func timeReads(readers, n int, size int64, cached, plain, held func(off int64, dst []byte)) (time.Duration, time.Duration, time.Duration) {
	rng := rand.New(rand.NewSource(int64(n)))
	offs := make([][warmTurn]int64, readers)
	dst := make([][]byte, readers)
	for r := range dst {
		dst[r] = make([]byte, n)
	}
	ways := [3]func(off int64, dst []byte){cached, plain, held}
	turns := warmBytes / readers / n / warmTurn
	var times [3][]time.Duration
	for turn := range turns {
		for r := range offs {
			for k := range offs[r] {
				offs[r][k] = rng.Int63n(size - int64(n))
			}
		}
		for w := range 3 {
			w = (w + turn) % 3
			var wg sync.WaitGroup
			start := time.Now()
			for r := range readers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for _, off := range offs[r] {
						ways[w](off, dst[r])
					}
				}()
			}
			wg.Wait()
			times[w] = append(times[w], time.Since(start))
		}
	}
	var medians [3]time.Duration
	for w := range times {
		slices.Sort(times[w])
		medians[w] = times[w][len(times[w])/2] * time.Duration(turns)
	}
	return medians[0], medians[1], medians[2]
}

// benchCacheDir is the folder of the "disk" cache: DATALOADERD_BENCH_CACHE_DIR
// when set (e.g. a tmpfs mounted with huge=within_size, to compare page
// sizes), else a temp dir of the test's.
func benchCacheDir(b *testing.B) string {
	if dir := os.Getenv("DATALOADERD_BENCH_CACHE_DIR"); dir != "" {
		sub, err := os.MkdirTemp(dir, "warm-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(sub) })
		return sub
	}
	return b.TempDir()
}
