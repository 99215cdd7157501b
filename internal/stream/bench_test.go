package stream

import (
	"math/rand"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// BenchmarkRankBatch measures the pipeline alone (sources, permutation,
// packing, mixing) writing batches of seq_len 4096 into memory, next to a
// plain copy of the same bytes (BenchmarkCopyCeiling): compare the two
// tokens/s figures of one run.
func BenchmarkRankBatch(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	dir := b.TempDir()
	docs := make([][]int32, 0, 20000)
	for len(docs) < cap(docs) {
		d, _ := testcorpus.UniqueDocs(rng, 1, 2000, 1)
		docs = append(docs, d[0])
	}
	prefix := testcorpus.Megatron(b, dir, "web", docs)
	cfg := Config{SeqLen: 4096, BatchSize: 8, Seed: 1, LogicalShards: 256, EOS: 0, BOS: -1,
		Datasets: []Dataset{{Name: "web", Path: prefix, Format: "megatron", Weight: 1}}}
	c, err := OpenCorpus(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	rank, err := NewRank(c, 0, 1, nil)
	if err != nil {
		b.Fatal(err)
	}
	buf := batchBuf(cfg)
	b.SetBytes(int64(len(buf) * 4))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := rank.NextBatch(buf); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*float64(len(buf))/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkCopyCeiling copies the bytes of one batch from a large source
// buffer, walking through it as the loader walks through a corpus.
func BenchmarkCopyCeiling(b *testing.B) {
	src := make([]int32, 64<<20/4*4)
	dst := make([]int32, 8*4097)
	b.SetBytes(int64(len(dst) * 4))
	off := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if off+len(dst) > len(src) {
			off = 0
		}
		copy(dst, src[off:off+len(dst)])
		off += len(dst)
	}
	b.ReportMetric(float64(b.N)*float64(len(dst))/b.Elapsed().Seconds(), "tokens/s")
}
