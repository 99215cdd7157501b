package stream

import (
	"context"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/mapped"
)

// The benchmarks in this file run on a corpus made outside the test: the
// Megatron prefix in DATALOADERD_BENCH_PREFIX (scripts/bench.py writes one of
// 1 GB or more and runs them with -cpu 1). They are skipped without it.
// Geometry is the end-to-end benchmark's: seq_len 4096, 8 lines per batch,
// DATALOADERD_BENCH_SHARDS logical shards (default 1024), one rank.

func envBenchCorpus(b *testing.B, metadata ...string) *Corpus {
	b.Helper()
	prefix := os.Getenv("DATALOADERD_BENCH_PREFIX")
	if prefix == "" {
		b.Skip("DATALOADERD_BENCH_PREFIX not set")
	}
	shards := uint64(1024)
	if s := os.Getenv("DATALOADERD_BENCH_SHARDS"); s != "" {
		var err error
		if shards, err = strconv.ParseUint(s, 10, 32); err != nil {
			b.Fatal(err)
		}
	}
	cfg := Config{SeqLen: 4096, BatchSize: 8, Seed: 1, LogicalShards: uint32(shards), EOS: 0, BOS: -1,
		Datasets: []Dataset{{Name: "bench", Path: prefix, Format: "megatron", Weight: 1}}, Metadata: metadata}
	c, err := OpenCorpus(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

func reportTokens(b *testing.B, perOp int) {
	b.SetBytes(int64(perOp * 4))
	b.ReportMetric(float64(b.N)*float64(perOp)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkCorpusCopyCeiling copies one batch worth of int32 tokens per op
// from a 256 MiB buffer (larger than any cache), walking through it as the
// loader walks through a corpus: the memory-bandwidth ceiling.
func BenchmarkCorpusCopyCeiling(b *testing.B) {
	const perOp = 8 * 4097
	src := make([]int32, 64<<20)
	for i := range src {
		src[i] = int32(i)
	}
	dst := make([]int32, perOp)
	off := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if off+perOp > len(src) {
			off = 0
		}
		copy(dst, src[off:off+perOp])
		off += perOp
	}
	reportTokens(b, perOp)
}

// BenchmarkCorpusRank is the pipeline alone (source, permutation, packing,
// mixing) writing batches into one buffer.
func BenchmarkCorpusRank(b *testing.B) {
	c := envBenchCorpus(b)
	rank, err := NewRank(c, 0, 1, nil)
	if err != nil {
		b.Fatal(err)
	}
	buf := batchBuf(c.Config())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := rank.NextBatch(buf); err != nil {
			b.Fatal(err)
		}
	}
	reportTokens(b, len(buf))
}

// benchSlots is an in-process ring of 8 slots, as the daemon's default.
type benchSlots [][]byte

func (s benchSlots) Slots() int        { return len(s) }
func (s benchSlots) Slot(i int) []byte { return s[i] }

// BenchmarkCorpusPipeline is the daemon's producer as a session runs it:
// Pipeline.Run filling a ring of 8 slots, one consumer taking and releasing
// every batch (without reading it: the clients' part is measured end to end).
func BenchmarkCorpusPipeline(b *testing.B) { benchPipeline(b, envBenchCorpus(b)) }

// BenchmarkCorpusPipelineMetadata is BenchmarkCorpusPipeline with every
// metadata field on (position_ids, document_ids, loss_mask, dataset_ids,
// cu_seqlens) in slots of their layout: tokens/s against the tokens-only row
// of the same run is the cost of the metadata.
func BenchmarkCorpusPipelineMetadata(b *testing.B) {
	benchPipeline(b, envBenchCorpus(b, MetadataFields...))
}

// BenchmarkCorpusPipelineGuard is BenchmarkCorpusPipeline with the
// pipeline's fault guard (mapped.Guard) switched off and on every 64
// batches, each chunk timed by the consumer: guard-ratio is the guarded
// tokens/s over the unguarded, measured side by side in one process, so that
// the drift of a shared machine falls on both alike.
func BenchmarkCorpusPipelineGuard(b *testing.B) {
	var off atomic.Bool
	saved := guardMapped
	guardMapped = func(fn func() error) error {
		if off.Load() {
			return fn()
		}
		return mapped.Guard(fn)
	}
	defer func() { guardMapped = saved }()
	var took [2]time.Duration
	var batches [2]int
	mode, chunk := 0, time.Now()
	benchPipelineEach(b, envBenchCorpus(b), func(i int) {
		if i%64 != 63 {
			return
		}
		took[mode] += time.Since(chunk)
		batches[mode] += 64
		mode = 1 - mode
		off.Store(mode == 1)
		chunk = time.Now()
	})
	if batches[0] > 0 && batches[1] > 0 {
		on := float64(batches[0]) / took[0].Seconds()
		unguarded := float64(batches[1]) / took[1].Seconds()
		b.ReportMetric(on/unguarded, "guard-ratio")
	}
}

func benchPipeline(b *testing.B, c *Corpus) { benchPipelineEach(b, c, nil) }

// benchPipelineEach runs the pipeline benchmark, calling each (when not
// nil) after the consumer released batch i.
func benchPipelineEach(b *testing.B, c *Corpus, each func(i int)) {
	rank, err := NewRank(c, 0, 1, nil)
	if err != nil {
		b.Fatal(err)
	}
	perOp := int(c.Config().BatchSize) * c.Config().LineTokens()
	ring := make(benchSlots, 8)
	for i := range ring {
		ring[i] = make([]byte, c.Config().Layout().Bytes)
	}
	p := NewPipeline(rank, ring, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		bt, err := p.Next(ctx, 0)
		if err != nil || bt.End {
			b.Fatalf("next: %v (end %v)", err, bt.End)
		}
		if err := p.Release(0, bt.Slot, bt.Step); err != nil {
			b.Fatal(err)
		}
		if each != nil {
			each(i)
		}
	}
	b.StopTimer()
	reportTokens(b, perOp)
	p.Close()
	cancel()
	<-done
}
