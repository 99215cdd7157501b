package tokenize

import (
	"testing"
	"time"
)

// benchKinds are the conformance documents of real text that the benchmark encodes.
var benchKinds = map[string]bool{"go": true, "go-testdata": true, "python": true, "man": true, "catalogs": true}

// BenchmarkEncode encodes the real-text documents of the conformance set with each
// tokenizer on one goroutine and one Encoder (a worker in the steady state), reporting bytes/s
// (MB/s) and tokens/s. scripts/tokenizer_bench.py runs it next to tiktoken.
func BenchmarkEncode(b *testing.B) {
	cs := loadConformance(b)
	var docs [][]byte
	size := 0
	for i, d := range cs.Docs {
		if benchKinds[d.Kind] {
			docs = append(docs, cs.text[i])
			size += len(cs.text[i])
		}
	}
	for i, r := range cs.Run {
		b.Run(r.Name, func(b *testing.B) {
			tk := cs.load(b, i)
			e := tk.newEncoder(nil)
			var ids []int32
			tokens := 0
			b.SetBytes(int64(size))
			b.ResetTimer()
			start := time.Now()
			for b.Loop() {
				tokens = 0
				for _, d := range docs {
					ids = e.Encode(ids[:0], d)
					tokens += len(ids)
				}
			}
			b.ReportMetric(float64(tokens)*float64(b.N)/time.Since(start).Seconds(), "tokens/s")
		})
	}
}
