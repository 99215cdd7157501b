package stream

import (
	"context"
	"testing"
	"time"
)

// BenchmarkExplain times what dataloaderd explain does for a step 10^4,
// 10^5 and 10^6 steps past a rank's state: build rank 0 of 8, move it to
// the step before (SkipTo), lay out that batch with its pieces
// (ExplainBatch). The corpus is the pipeline benchmark's (64M int32 tokens
// of Megatron, documents of 1 to 2000 tokens), the geometry a pretraining
// one: seq_len 4096, batch_size 8, 64 logical shards, endless (and
// bounded: 5,000 epochs, so that the run outlasts 10^6 steps). Beside the
// count (SkipTo), SkipBatch batch by batch for 10^4 and 10^5 steps; and
// the walk of one shard's stream within an epoch (batch_size 1, one
// shard), which bounds the count's cost on a corpus whose shards' epochs
// are longer than the skip: it reads every document's length and last
// token. Each figure is one run (-benchtime 1x), in ms/op.
func BenchmarkExplain(b *testing.B) {
	prefix := benchCorpus(b, b.TempDir(), 64<<20, 4)
	cfg := Config{SeqLen: 4096, BatchSize: 8, Seed: 1, LogicalShards: 64, EOS: 0, BOS: -1,
		Datasets: []Dataset{{Name: "web", Path: prefix, Format: "megatron", Weight: 1}}}
	for _, tc := range []struct {
		name       string
		steps      uint64
		batchwise  bool
		batch, shd uint32
		world      uint32
		epochs     uint32
	}{
		{"count/1e4", 1e4, false, 8, 64, 8, 0}, {"count/1e5", 1e5, false, 8, 64, 8, 0}, {"count/1e6", 1e6, false, 8, 64, 8, 0},
		{"batchwise/1e4", 1e4, true, 8, 64, 8, 0}, {"batchwise/1e5", 1e5, true, 8, 64, 8, 0},
		{"count-bounded/1e6", 1e6, false, 8, 64, 8, 5000},
		{"one-epoch-walk/1e4", 1e4, false, 1, 1, 1, 0},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := cfg
			cfg.BatchSize, cfg.LogicalShards, cfg.Epochs = tc.batch, tc.shd, tc.epochs
			c, err := OpenCorpus(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			buf := batchBuf(cfg)
			var skip time.Duration
			for range b.N {
				rank, err := NewRank(c, 0, tc.world, nil)
				if err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				if tc.batchwise {
					for rank.Step() < tc.steps-1 {
						if _, err := rank.SkipBatch(context.Background()); err != nil {
							b.Fatal(err)
						}
					}
				} else if err := rank.SkipTo(context.Background(), tc.steps-1); err != nil {
					b.Fatal(err)
				}
				skip += time.Since(start)
				if _, pieces, err := rank.ExplainBatch(buf); err != nil || len(pieces) == 0 {
					b.Fatalf("%d pieces, %v", len(pieces), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/op")
			b.ReportMetric(float64(skip.Milliseconds())/float64(b.N), "skip-ms/op")
			b.ReportMetric(float64(tc.steps)*float64(cfg.BatchSize)*float64(cfg.LineTokens())/1e9, "Gtokens-skipped")
		})
	}
}
