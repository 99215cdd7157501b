package stream

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/objstore/s3test"
)

// BenchmarkObjectsIndexOpen opens a Megatron dataset in object storage
// whose index holds DATALOADERD_BENCH_INDEX_DOCS documents (default 10^7:
// a 200 MB index; 10^8 is 2 GB, more than half the default 2 GiB cache),
// with the default cache and 64 logical shards, and reads rank 0 of 1's
// first batch. The documents are one uint8 token each, or, with
// DATALOADERD_BENCH_INDEX_TOKENS=MAX, 1 to MAX uint16 tokens drawn at
// random (their .bin a sparse file of zeros: all that is read of it is a
// few windows). DATALOADERD_BENCH_DELAY_MS delays every request by that
// many milliseconds (a store elsewhere); a list ("0,20,50") runs one
// sub-benchmark per delay over the same objects. It reports the open's
// time and what it fetched (open-MiB-fetched, open-GETs), the Go heap and
// the process's resident memory it added (open-heap-MiB, open-RSS-MiB),
// and the time, bytes and GETs to the first batch (first-batch-ms,
// first-MiB-fetched, first-GETs).
func BenchmarkObjectsIndexOpen(b *testing.B) {
	docs := benchEnvInt(b, "DATALOADERD_BENCH_INDEX_DOCS", 10_000_000, 64)
	maxTokens := benchEnvInt(b, "DATALOADERD_BENCH_INDEX_TOKENS", 1, 1)
	delays := []int{-1}
	if s := os.Getenv("DATALOADERD_BENCH_DELAY_MS"); s != "" {
		delays = delays[:0]
		for _, f := range strings.Split(s, ",") {
			ms, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || ms < 0 {
				b.Fatalf("DATALOADERD_BENCH_DELAY_MS=%q: want milliseconds, or a list of them", s)
			}
			delays = append(delays, ms)
		}
	}
	srv := s3test.Start(b)
	srv.CreateBucket(b, "idx")
	if maxTokens == 1 {
		dir := b.TempDir()
		writeOneTokenMegatron(b, filepath.Join(dir, "corpus"), docs)
		srv.PutDir(b, "idx", "meg/", dir)
		os.RemoveAll(dir)
	} else {
		writeSparseMegatron(b, srv, "idx", "meg/corpus", docs, maxTokens)
	}
	if len(delays) == 1 {
		benchIndexOpen(b, srv, delays[0], docs)
		return
	}
	for _, ms := range delays {
		b.Run(fmt.Sprintf("delay=%dms", ms), func(b *testing.B) { benchIndexOpen(b, srv, ms, docs) })
	}
}

// benchEnvInt is the integer in environment variable name, at least least;
// def when it is unset.
func benchEnvInt(b *testing.B, name string, def, least int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < least {
		b.Fatalf("%s=%q: want a number, at least %d", name, s, least)
	}
	return n
}

// benchIndexOpen is BenchmarkObjectsIndexOpen's loop over the objects put
// in srv, with every request delayed by ms milliseconds (none when < 0:
// straight to the server).
func benchIndexOpen(b *testing.B, srv *s3test.Server, ms, docs int) {
	endpoint := srv.Endpoint
	if ms >= 0 {
		proxy := s3test.NewFaultProxy(b, srv.Endpoint, 0, 1)
		proxy.SetDelay(time.Duration(ms) * time.Millisecond)
		endpoint = proxy.URL
	}
	cfg := Config{SeqLen: 2047, BatchSize: 8, Seed: 7, LogicalShards: 64, EOS: 0, BOS: -1, Pad: 0, Epochs: 1,
		ShuffleWindow: 4, Datasets: []Dataset{{Name: "meg", Path: "s3://idx/meg/corpus", Format: "megatron", Weight: 1}}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		store := newStore(b, srv, endpoint, objstore.Options{})
		res := objectResources(b, store)
		heap0, rss0 := memoryNow()
		b.StartTimer()
		start := time.Now()
		corpus, err := OpenCorpusWith(cfg, res)
		if err != nil {
			b.Fatal(err)
		}
		open := time.Since(start)
		opened := store.Stats()
		heap1, rss1 := memoryNow()
		rank, err := NewRank(corpus, 0, 1, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := rank.NextBatch(batchBuf(cfg)); err != nil {
			b.Fatal(err)
		}
		first := time.Since(start)
		b.StopTimer()
		firstStats := store.Stats()
		b.ReportMetric(float64(open.Microseconds())/1000, "open-ms")
		b.ReportMetric(float64(opened.FetchedBytes)/(1<<20), "open-MiB-fetched")
		b.ReportMetric(float64(opened.Gets), "open-GETs")
		b.ReportMetric(float64(heap1-heap0)/(1<<20), "open-heap-MiB")
		b.ReportMetric(float64(rss1-rss0)/(1<<20), "open-RSS-MiB")
		b.ReportMetric(float64(first.Microseconds())/1000, "first-batch-ms")
		b.ReportMetric(float64(firstStats.FetchedBytes)/(1<<20), "first-MiB-fetched")
		b.ReportMetric(float64(firstStats.Gets), "first-GETs")
		b.ReportMetric(float64(20*int64(docs))/(1<<20), "index-MiB")
		corpus.Close()
		store.Close()
		b.StartTimer()
	}
}

// memoryNow is the Go heap in use, after a collection, and the process's
// resident set, in bytes.
func memoryNow() (heap, rss int64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	status, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			rss = kb << 10
		}
	}
	return int64(ms.HeapInuse), rss
}

// writeOneTokenMegatron writes a Megatron dataset at prefix of docs
// documents of one uint8 token each: an index of 20 bytes a document.
func writeOneTokenMegatron(b *testing.B, prefix string, docs int) {
	b.Helper()
	writeMegatronIndex(b, prefix+".idx", 1, docs, func() func() uint32 {
		return func() uint32 { return 1 }
	})
	writeBuffered(b, prefix+".bin", func(w *bufio.Writer) error {
		for i := range docs {
			w.WriteByte(byte(1 + i%250))
		}
		return nil
	})
}

// writeSparseMegatron puts at bucket/key a Megatron dataset of docs
// documents of 1 to maxTokens uint16 tokens each (drawn with a fixed
// seed), whose .bin is a sparse file of zeros (token 0, the benchmark's
// EOS). Both are written straight into the server's directory, over a
// placeholder put first so that the server has their metadata: an upload
// of the index (2 GB for 10^8 documents) would take longer than the
// benchmark, and one of the .bin (400 GB) could not be made.
func writeSparseMegatron(b *testing.B, srv *s3test.Server, bucket, key string, docs, maxTokens int) {
	b.Helper()
	lengths := func() func() uint32 {
		rng := rand.New(rand.NewPCG(5, 7))
		return func() uint32 { return 1 + uint32(rng.IntN(maxTokens)) }
	}
	var tokens int64
	next := lengths()
	for range docs {
		tokens += int64(next())
	}
	path := filepath.Join(srv.Dir, bucket, filepath.FromSlash(key))
	srv.Put(b, bucket, key+".idx", []byte("placeholder"))
	srv.Put(b, bucket, key+".bin", []byte("placeholder"))
	writeMegatronIndex(b, path+".idx", 8, docs, lengths) // uint16
	if err := os.Truncate(path+".bin", 0); err != nil {
		b.Fatal(err)
	}
	if err := os.Truncate(path+".bin", 2*tokens); err != nil {
		b.Fatal(err)
	}
}

// writeMegatronIndex writes a Megatron index of docs sequences whose
// lengths the functions lengths makes give (each call of lengths starts
// them over), of the dtype with Megatron's code, at path.
func writeMegatronIndex(b *testing.B, path string, code byte, docs int, lengths func() func() uint32) {
	b.Helper()
	size := map[byte]uint64{1: 1, 8: 2}[code]
	le := binary.LittleEndian
	writeBuffered(b, path, func(w *bufio.Writer) error {
		var head bytes.Buffer
		head.WriteString("MMIDIDX\x00\x00")
		head.Write(le.AppendUint64(nil, 1))
		head.WriteByte(code)
		head.Write(le.AppendUint64(nil, uint64(docs)))
		head.Write(le.AppendUint64(nil, uint64(docs+1)))
		w.Write(head.Bytes())
		var buf [8]byte
		next := lengths()
		for range docs {
			w.Write(le.AppendUint32(buf[:0], next()))
		}
		next = lengths()
		var at uint64
		for range docs {
			w.Write(le.AppendUint64(buf[:0], at))
			at += uint64(next()) * size
		}
		for i := range docs + 1 {
			w.Write(le.AppendUint64(buf[:0], uint64(i)))
		}
		return nil
	})
}

// writeBuffered writes the file at path through fill.
func writeBuffered(b *testing.B, path string, fill func(w *bufio.Writer) error) {
	b.Helper()
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	if err := fill(w); err != nil {
		b.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}
