package stream

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/objstore/s3test"
)

// scaleRunTokens is BenchmarkObjectsScale's run_tokens: runs of 16 MiB of
// int32 tokens, 256 blocks of 64 KiB, so that the block at each end of a
// run, fetched twice, costs under 1% (docs/objects.md, "Run size and window
// size").
const scaleRunTokens = 4 << 20

// scaleProbeBytes is the .bin of the corpus the cache is planned on.
const scaleProbeBytes = 1 << 30

// scaleConfig is BenchmarkObjectsScale's job: 2,048-token lines, batches
// of 8, the default shuffle window (8 lines), runs of scaleRunTokens, and
// 8 logical shards, the fewest that give each of 8 ranks one (fewer shards
// make the working set, and so the corpora, smaller).
func scaleConfig(c scaleCorpus, seed uint64) Config {
	return Config{SeqLen: 2047, BatchSize: 8, Seed: seed, LogicalShards: 8, EOS: 0, BOS: -1, Pad: 0,
		Epochs: 1, ShuffleWindow: 8, RunTokens: scaleRunTokens,
		Datasets: []Dataset{{Name: "meg", Path: c.path(), Format: "megatron", Weight: 1}}}
}

// BenchmarkObjectsScale reads one epoch of Megatron corpora 1, 10 and 100
// times the node's cache from the local S3 server (versitygw), directly
// and behind a proxy that adds 50 ms to every request, with 1 and 8 ranks
// of one node. The cache is the documented size (scaleCache): the working
// set of scaleConfig rounded up to a MiB. Per run it reports bytes fetched
// over bytes read (scaleCorpus.readBytes) and over the corpus, GETs,
// tokens/s of the node and that over 8 x 100k tokens/s (what 8 GPUs
// take), the time to the first batch, and the process's peak RSS during
// the run. Then, on the 100x corpus with 8 ranks and 50 ms, a disk cache
// that holds the corpus: a first epoch, a second, and one more after the
// store is closed and a new one opened on the same directory (a daemon's
// restart). make bench-objects runs it.
func BenchmarkObjectsScale(b *testing.B) {
	srv := s3test.Start(b)
	srv.CreateBucket(b, scaleBucket)
	proxy := s3test.NewFaultProxy(b, srv.Endpoint, 0, 1)
	proxy.SetDelay(50 * time.Millisecond)
	cache := scaleCache(b)
	endpoints := map[int]string{0: srv.Endpoint, 50: proxy.URL}
	for _, ratio := range []int64{1, 10, 100} {
		b.Run(fmt.Sprintf("corpus=%dx", ratio), func(b *testing.B) {
			c := writeScaleCorpus(b, srv, fmt.Sprintf("corpus%dx", ratio), ratio*cache)
			checkScaleWorkingSet(b, srv, c, cache)
			for _, delay := range []int{0, 50} {
				for _, ranks := range []int{1, 8} {
					b.Run(fmt.Sprintf("ranks=%d/delay=%dms", ranks, delay), func(b *testing.B) {
						opts := objstore.Options{MemoryBytes: cache}
						for range b.N {
							store := scaleStore(b, srv, endpoints[delay], opts)
							reportScale(b, c, cache, scaleEpoch(b, scaleConfig(c, 7), store, ranks))
							store.Close()
						}
					})
				}
			}
			if ratio == 100 {
				b.Run("disk-cache/ranks=8/delay=50ms", func(b *testing.B) {
					for range b.N {
						scaleRestart(b, srv, proxy.URL, c, 8)
					}
				})
			}
		})
	}
}

// scaleCache is the documented cache size for scaleConfig: the working
// set that `dataloaderd plan --ranks N` reports (Corpus.WorkingSet) for 1
// and for 8 ranks of the node, the larger, rounded up to a whole MiB
// (--object-cache-mb). It is planned on local files of a probe corpus of
// scaleProbeBytes of the same documents (its .bin a sparse file: a plan
// reads the index alone): the working set grows with the
// corpus only while the index is smaller than the blocks its spans
// touch, and stops there, well below the probe; so every corpus the
// benchmark reads, 100x included, has a working set within it
// (checkScaleWorkingSet).
func scaleCache(b *testing.B) int64 {
	b.Helper()
	dir := b.TempDir()
	probe := writeScaleFiles(b, filepath.Join(dir, "probe"), scaleProbeBytes, true)
	probe.local = filepath.Join(dir, "probe")
	ws := scaleWorkingSet(b, nil, probe)
	for _, ext := range []string{".bin", ".idx"} {
		os.Remove(probe.local + ext)
	}
	cache := (ws + 1<<20 - 1) &^ (1<<20 - 1)
	b.Logf("cache %d MiB: the working set of 1 or 8 ranks is %d bytes (probe corpus of %d MiB)", cache>>20, ws, probe.bytes()>>20)
	return cache
}

// scaleWorkingSet is the larger working set of 1 and of 8 ranks of a
// node reading c with scaleConfig, in 64 KiB blocks: from the store
// when srv is set (the datasets in object storage), else as `dataloaderd
// plan` plans local files (as though they were).
func scaleWorkingSet(b *testing.B, srv *s3test.Server, c scaleCorpus) int64 {
	b.Helper()
	var store *objstore.Store
	if srv != nil {
		store = scaleStore(b, srv, "", objstore.Options{})
		defer store.Close()
	}
	corpus, err := OpenCorpusWith(scaleConfig(c, 7), objectResources(b, store))
	if err != nil {
		b.Fatal(err)
	}
	defer corpus.Close()
	one := corpus.WorkingSet([]uint32{0}, 1, objstore.DefaultBlockSize)
	eight := corpus.WorkingSet([]uint32{0, 1, 2, 3, 4, 5, 6, 7}, 8, objstore.DefaultBlockSize)
	pick := func(ws WorkingSet) int64 {
		if srv == nil {
			return ws.AllBytes
		}
		return ws.Bytes
	}
	b.Logf("%s: working set %d bytes for 1 rank, %d for 8", c.path(), pick(one), pick(eight))
	return max(pick(one), pick(eight))
}

// checkScaleWorkingSet fails when c's own working set is more than the
// cache: the cache would not be the documented size for it.
func checkScaleWorkingSet(b *testing.B, srv *s3test.Server, c scaleCorpus, cache int64) {
	b.Helper()
	if ws := scaleWorkingSet(b, srv, c); ws > cache {
		b.Fatalf("%s: working set %d bytes, more than the %d-byte cache sized on the probe", c.key, ws, cache)
	}
}

// scaleStore opens a store reaching srv (through endpoint, when set);
// the caller closes it.
func scaleStore(b *testing.B, srv *s3test.Server, endpoint string, opts objstore.Options) *objstore.Store {
	b.Helper()
	if endpoint == "" {
		endpoint = srv.Endpoint
	}
	for _, kv := range srv.EnvFor(endpoint) {
		name, value, _ := strings.Cut(kv, "=")
		b.Setenv(name, value)
	}
	store, err := objstore.New(opts)
	if err != nil {
		b.Fatal(err)
	}
	return store
}

// scaleResult is what one epoch took.
type scaleResult struct {
	tokens         int64
	elapsed, first time.Duration
	stats          objstore.Stats
	// startRSS is the process's resident set when the epoch began (the
	// Go runtime, the test, what earlier runs left mapped), peakRSS its
	// peak during the epoch; 0: not measured.
	startRSS, peakRSS int64
}

// scaleEpoch reads one epoch of cfg with ranks ranks of one node from
// store, from its open, and measures it.
func scaleEpoch(b *testing.B, cfg Config, store *objstore.Store, ranks int) scaleResult {
	b.Helper()
	before := store.Stats()
	reset := resetPeakRSS()
	startRSS := procStatusBytes("VmRSS:")
	b.StartTimer()
	start := time.Now()
	tokens, first := readEpoch(b, cfg, store, ranks)
	r := scaleResult{tokens: tokens, elapsed: time.Since(start), first: first}
	b.StopTimer()
	if reset {
		r.startRSS, r.peakRSS = startRSS, peakRSS()
	}
	r.stats = store.Stats()
	r.stats.Requests -= before.Requests
	r.stats.Gets -= before.Gets
	r.stats.FetchedBytes -= before.FetchedBytes
	r.stats.Misses -= before.Misses
	r.stats.Ahead -= before.Ahead
	return r
}

// reportScale reports one epoch of c with the cache of cache bytes, and
// logs it.
func reportScale(b *testing.B, c scaleCorpus, cache int64, r scaleResult) {
	b.Helper()
	tps, ratio := logScale(b, c, cache, r)
	b.ReportMetric(tps, "tokens/s")
	b.ReportMetric(tps/(8*100e3), "x-8-GPUs")
	b.ReportMetric(float64(r.first.Microseconds())/1000, "first-batch-ms")
	b.ReportMetric(float64(r.peakRSS)/(1<<20), "peak-RSS-MiB")
	b.ReportMetric(float64(r.peakRSS-r.startRSS)/(1<<20), "RSS-added-MiB")
	b.ReportMetric(float64(r.stats.Gets), "GETs")
	b.ReportMetric(float64(r.stats.FetchedBytes)/(1<<20), "MiB-fetched")
	b.ReportMetric(ratio, "fetched/read")
	b.ReportMetric(float64(r.stats.FetchedBytes)/float64(c.bytes()), "fetched/corpus")
	b.ReportMetric(float64(c.bytes())/(1<<20), "corpus-MiB")
	b.ReportMetric(float64(cache)/(1<<20), "cache-MiB")
}

// logScale logs one epoch of c as a line of docs/benchmarks.md's table;
// it returns its tokens/s and bytes fetched over bytes read.
func logScale(b *testing.B, c scaleCorpus, cache int64, r scaleResult) (tps, ratio float64) {
	b.Helper()
	tps = float64(r.tokens) / r.elapsed.Seconds()
	ratio = float64(r.stats.FetchedBytes) / float64(c.readBytes())
	b.Logf("| %.2f GiB | %d MiB | %.1f s | %.2f M | %.1f | %.0f ms | %.1f (+%.1f) MiB | %d (%d) | %.1f MiB | %.3f | %.3f | %d / %d |",
		float64(c.bytes())/(1<<30), cache>>20, r.elapsed.Seconds(), tps/1e6, tps/(8*100e3), float64(r.first.Microseconds())/1000,
		float64(r.peakRSS)/(1<<20), float64(r.peakRSS-r.startRSS)/(1<<20), r.stats.Gets, r.stats.Requests, float64(r.stats.FetchedBytes)/(1<<20), ratio,
		float64(r.stats.FetchedBytes)/float64(c.bytes()), r.stats.Misses, r.stats.Ahead)
	return tps, ratio
}

// scaleRestart reads c with ranks ranks through a disk cache that holds
// it (Options.Dir, DiskBytes the corpus and 64 MiB): an epoch that fills
// it, a second one (another seed), then, after the store is closed and a
// new one opened on the directory, as after a daemon's restart, a third.
func scaleRestart(b *testing.B, srv *s3test.Server, endpoint string, c scaleCorpus, ranks int) {
	b.Helper()
	dir, err := os.MkdirTemp(b.TempDir(), "objcache")
	if err != nil {
		b.Fatal(err)
	}
	opts := objstore.Options{Dir: dir, DiskBytes: c.bytes() + 64<<20}
	store := scaleStore(b, srv, endpoint, opts)
	for i, name := range []string{"first", "second", "restart"} {
		if name == "restart" {
			if err := store.Close(); err != nil {
				b.Fatal(err)
			}
			store = scaleStore(b, srv, endpoint, opts)
		}
		r := scaleEpoch(b, scaleConfig(c, uint64(7+i)), store, ranks)
		b.Logf("%s epoch:", name)
		tps, _ := logScale(b, c, opts.DiskBytes, r)
		b.ReportMetric(tps, name+"-tokens/s")
		b.ReportMetric(float64(r.stats.FetchedBytes)/(1<<20), name+"-MiB-fetched")
	}
	store.Close()
}
