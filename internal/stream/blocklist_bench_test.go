package stream

import (
	"testing"
)

// BenchmarkBlocklist measures what a blocklist costs the making of batches
// (a set lookup per document piece copied, the blocked ones padded rather
// than read): batches of seq_len 4096, with document metadata, over a 64M
// token int32 Megatron corpus, with no blocklist, and with one naming 1%
// and 10% of its documents; compare the tokens/s of one run
// (docs/benchmarks.md, "Blocklists").
func BenchmarkBlocklist(b *testing.B) {
	prefix := benchCorpus(b, b.TempDir(), 64<<20, 4)
	for _, tc := range []struct {
		name  string
		every uint64 // block one document in every; 0: no blocklist
	}{{"none", 0}, {"1pct", 100}, {"10pct", 10}} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := Config{SeqLen: 4096, BatchSize: 8, Seed: 1, LogicalShards: 256, EOS: 0, BOS: -1, Pad: 0,
				Metadata: []string{MetaDocumentIDs, MetaLossMask},
				Datasets: []Dataset{{Name: "web", Path: prefix, Format: "megatron", Weight: 1}}}
			if tc.every > 0 {
				plain, err := OpenCorpus(cfg)
				if err != nil {
					b.Fatal(err)
				}
				units := plain.datasets[0].src.Units()
				plain.Close()
				for u := uint64(0); u < units; u += tc.every {
					cfg.Blocklist.Documents = append(cfg.Blocklist.Documents, BlockedDocument{Dataset: "web", Document: &u})
				}
			}
			c, err := OpenCorpus(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			rank, err := NewRank(c, 0, 1, nil)
			if err != nil {
				b.Fatal(err)
			}
			slot := make([]byte, cfg.Layout().Bytes)
			tokens := int(cfg.BatchSize) * cfg.LineTokens()
			b.SetBytes(int64(tokens * 4))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := rank.NextBatchBytes(slot); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)*float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
