package stream

import (
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/objstore/s3test"
	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// benchObjectTokens is the size of BenchmarkObjectsNode's corpus: 64 MiB
// of int32 tokens in documents of 1 to 4000 tokens.
const benchObjectTokens = 16 << 20

// BenchmarkObjectsNode reads one epoch of a Megatron corpus with 1, 2 and
// 8 ranks of one node (one corpus, as the daemon shares it) from local
// disk, from the local S3 server, and from that server behind a proxy that
// delays every request by 20 ms (the first-byte latency of a store
// elsewhere), with the default cache, and without the delay with a cache of
// half the corpus. Each
// run starts with an empty cache. It reports tokens/s, the time to the
// first batch (from opening the dataset), and per node the requests, GETs,
// MiB fetched, the cache blocks a read had to fetch itself
// (blocks-missed) and those fetched ahead of their reads (blocks-ahead);
// then a second epoch (another seed) from the cache the first filled
// (warm-tokens/s, warm-MiB-fetched). make bench-objects runs it.
func BenchmarkObjectsNode(b *testing.B) {
	srv := s3test.Start(b)
	rng := rand.New(rand.NewSource(1))
	var docs [][]int32
	for n := 0; n < benchObjectTokens; {
		d := make([]int32, 1+rng.Intn(4000))
		for i := range d {
			d[i] = 1 + rng.Int31n(60000)
		}
		docs = append(docs, d)
		n += len(d)
	}
	dir := b.TempDir()
	prefix := testcorpus.Megatron(b, dir, "corpus", docs)
	srv.CreateBucket(b, "bench")
	srv.PutDir(b, "bench", "meg/", dir)
	proxy := s3test.NewFaultProxy(b, srv.Endpoint, 0, 1)
	proxy.SetDelay(20 * time.Millisecond)
	type row struct {
		where string
		cache int64 // the cache's memory budget; 0: the default (2 GiB)
	}
	for _, rw := range []row{{"disk", 0}, {"s3", 0}, {"s3+20ms", 0}, {"s3/cache=32MiB", 32 << 20}} {
		for _, world := range []int{1, 2, 8} {
			b.Run(fmt.Sprintf("%s/ranks=%d", rw.where, world), func(b *testing.B) {
				ds := Dataset{Name: "meg", Path: prefix, Format: "megatron", Weight: 1}
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					var store *objstore.Store
					if rw.where != "disk" {
						endpoint := srv.Endpoint
						if strings.HasPrefix(rw.where, "s3+20ms") {
							endpoint = proxy.URL
						}
						store = newStore(b, srv, endpoint, objstore.Options{MemoryBytes: rw.cache})
						ds.Path = "s3://bench/meg/corpus"
					}
					cfg := Config{SeqLen: 2047, BatchSize: 8, Seed: 7, LogicalShards: 64, EOS: 0, BOS: -1, Pad: 0,
						Epochs: 1, ShuffleWindow: 4, Datasets: []Dataset{ds}}
					b.StartTimer()
					start := time.Now()
					tokens, first := readEpoch(b, cfg, store, world)
					elapsed := time.Since(start)
					b.ReportMetric(float64(tokens)/elapsed.Seconds(), "tokens/s")
					b.ReportMetric(float64(first.Microseconds())/1000, "first-batch-ms")
					if store == nil {
						continue
					}
					cold := store.Stats()
					b.ReportMetric(float64(cold.Gets), "GETs")
					b.ReportMetric(float64(cold.Requests), "requests")
					b.ReportMetric(float64(cold.FetchedBytes)/(1<<20), "MiB-fetched")
					b.ReportMetric(float64(cold.Misses), "blocks-missed")
					b.ReportMetric(float64(cold.Ahead), "blocks-ahead")
					// The same epoch again, from the cache the first filled.
					b.StopTimer()
					cfg.Seed++
					b.StartTimer()
					start = time.Now()
					tokens, _ = readEpoch(b, cfg, store, world)
					b.ReportMetric(float64(tokens)/time.Since(start).Seconds(), "warm-tokens/s")
					warm := store.Stats()
					b.ReportMetric(float64(warm.FetchedBytes-cold.FetchedBytes)/(1<<20), "warm-MiB-fetched")
				}
			})
		}
	}
}

// readEpoch opens the corpus and reads it to its end with world ranks at
// once; it returns the tokens served and the time from the open to rank
// 0's first batch.
func readEpoch(b testing.TB, cfg Config, store *objstore.Store, world int) (int64, time.Duration) {
	start := time.Now()
	res := objectResources(b, store)
	corpus, err := OpenCorpusWith(cfg, res)
	if err != nil {
		b.Fatal(err)
	}
	defer corpus.Close()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		tokens int64
		first  time.Duration
	)
	for r := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rank, err := NewRank(corpus, uint32(r), uint32(world), nil)
			if err != nil {
				b.Error(err)
				return
			}
			buf := batchBuf(cfg)
			var n int64
			for i := 0; ; i++ {
				p, err := rank.NextBatch(buf)
				if err != nil {
					b.Error(err)
					return
				}
				if i == 0 && r == 0 {
					mu.Lock()
					first = time.Since(start)
					mu.Unlock()
				}
				if p.Lines == 0 {
					break
				}
				n += int64(p.Lines * cfg.LineTokens())
			}
			mu.Lock()
			tokens += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	return tokens, first
}
