package stream

import (
	"encoding/binary"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
)

// benchCorpus writes a Megatron dataset of about tokens tokens in documents of
// 1 to 2000 tokens (token values random below 50000) with the given element
// size (2: uint16, 4: int32) and returns its prefix.
func benchCorpus(b *testing.B, dir string, tokens int, size int) string {
	rng := rand.New(rand.NewSource(1))
	var lengths []int32
	for n := 0; n < tokens; {
		l := 1 + rng.Intn(2000)
		lengths = append(lengths, int32(l))
		n += l
	}
	var total int
	for _, l := range lengths {
		total += int(l)
	}
	bin := make([]byte, total*size)
	for i := 0; i < total; i++ {
		v := uint32(1 + rng.Intn(50000))
		if size == 2 {
			binary.LittleEndian.PutUint16(bin[2*i:], uint16(v))
		} else {
			binary.LittleEndian.PutUint32(bin[4*i:], v)
		}
	}
	n := len(lengths)
	idx := make([]byte, 0, 34+n*4+(2*n+1)*8)
	idx = append(idx, "MMIDIDX\x00\x00"...)
	idx = binary.LittleEndian.AppendUint64(idx, 1)
	code := byte(4) // int32
	if size == 2 {
		code = 8 // uint16
	}
	idx = append(idx, code)
	idx = binary.LittleEndian.AppendUint64(idx, uint64(n))
	idx = binary.LittleEndian.AppendUint64(idx, uint64(n+1))
	for _, l := range lengths {
		idx = binary.LittleEndian.AppendUint32(idx, uint32(l))
	}
	var ptr int64
	for _, l := range lengths {
		idx = binary.LittleEndian.AppendUint64(idx, uint64(ptr))
		ptr += int64(l) * int64(size)
	}
	for i := 0; i <= n; i++ {
		idx = binary.LittleEndian.AppendUint64(idx, uint64(i))
	}
	prefix := filepath.Join(dir, "web")
	if err := os.WriteFile(prefix+".bin", bin, 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(prefix+".idx", idx, 0o644); err != nil {
		b.Fatal(err)
	}
	return prefix
}

// BenchmarkRankBatch measures the pipeline alone (sources, permutation,
// packing, mixing) writing batches of seq_len 4096 into memory, over a 64M
// token corpus of int32 and of uint16 tokens, next to a plain copy of the
// same bytes (BenchmarkCopyCeiling): compare the tokens/s figures of one run.
func BenchmarkRankBatch(b *testing.B) {
	for _, tc := range []struct {
		name string
		size int
	}{{"int32", 4}, {"uint16", 2}} {
		prefix := benchCorpus(b, b.TempDir(), 64<<20, tc.size)
		b.Run(tc.name, func(b *testing.B) {
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
		})
	}
}

// BenchmarkCopyCeiling copies the bytes of one batch from a large source
// buffer, walking through it as the loader walks through a corpus.
func BenchmarkCopyCeiling(b *testing.B) {
	src := make([]int32, 64<<20)
	for i := range src {
		src[i] = int32(i)
	}
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
