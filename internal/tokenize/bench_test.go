package tokenize

import (
	"testing"
	"time"

	"golang.org/x/text/unicode/norm"
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

// BenchmarkNFC normalizes the real-text documents of the conformance set (what the Qwen
// tokenizer does before it splits), next to golang.org/x/text's NFC for scale: check only
// (span, x/text's IsNormal) and check-then-normalize (append, x/text's Append).
func BenchmarkNFC(b *testing.B) {
	cs := loadConformance(b)
	var docs [][]byte
	size := 0
	for i, d := range cs.Docs {
		if benchKinds[d.Kind] {
			docs = append(docs, cs.text[i])
			size += len(cs.text[i])
		}
	}
	var buf []byte
	for _, bc := range []struct {
		name string
		f    func([]byte)
	}{
		{"span", func(d []byte) { nfcSpan(d) }},
		{"append", func(d []byte) {
			if n := nfcSpan(d); n < len(d) {
				buf = appendNFC(append(buf[:0], d[:n]...), d[n:])
			}
		}},
		{"xtext-isnormal", func(d []byte) { norm.NFC.IsNormal(d) }},
		{"xtext-append", func(d []byte) {
			if !norm.NFC.IsNormal(d) {
				buf = norm.NFC.Append(buf[:0], d...)
			}
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				for _, d := range docs {
					bc.f(d)
				}
			}
		})
	}
}
