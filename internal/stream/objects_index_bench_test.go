package stream

import (
	"bufio"
	"bytes"
	"encoding/binary"
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
// each one uint8 token, with the default cache and 64 logical shards, and
// reads rank 0 of 1's first batch; DATALOADERD_BENCH_DELAY_MS delays every
// request by that many milliseconds (a store elsewhere). It reports the open's time and what it
// fetched (open-MiB-fetched, open-GETs), the Go heap and the process's
// resident memory it added (open-heap-MiB, open-RSS-MiB), and the time
// and bytes to the first batch (first-batch-ms, first-MiB-fetched).
func BenchmarkObjectsIndexOpen(b *testing.B) {
	docs := 10_000_000
	if s := os.Getenv("DATALOADERD_BENCH_INDEX_DOCS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 64 {
			b.Fatalf("DATALOADERD_BENCH_INDEX_DOCS=%q: want a number of documents, at least 64", s)
		}
		docs = n
	}
	srv := s3test.Start(b)
	endpoint := srv.Endpoint
	if s := os.Getenv("DATALOADERD_BENCH_DELAY_MS"); s != "" {
		ms, err := strconv.Atoi(s)
		if err != nil || ms < 0 {
			b.Fatalf("DATALOADERD_BENCH_DELAY_MS=%q: want milliseconds", s)
		}
		proxy := s3test.NewFaultProxy(b, srv.Endpoint, 0, 1)
		proxy.SetDelay(time.Duration(ms) * time.Millisecond)
		endpoint = proxy.URL
	}
	dir := b.TempDir()
	writeOneTokenMegatron(b, filepath.Join(dir, "corpus"), docs)
	srv.CreateBucket(b, "idx")
	srv.PutDir(b, "idx", "meg/", dir)
	os.RemoveAll(dir)
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
	write := func(path string, fill func(w *bufio.Writer) error) {
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
	le := binary.LittleEndian
	write(prefix+".idx", func(w *bufio.Writer) error {
		var head bytes.Buffer
		head.WriteString("MMIDIDX\x00\x00")
		head.Write(le.AppendUint64(nil, 1))
		head.WriteByte(1) // uint8
		head.Write(le.AppendUint64(nil, uint64(docs)))
		head.Write(le.AppendUint64(nil, uint64(docs+1)))
		w.Write(head.Bytes())
		var buf [8]byte
		for range docs {
			w.Write(le.AppendUint32(buf[:0], 1))
		}
		for i := range docs {
			w.Write(le.AppendUint64(buf[:0], uint64(i)))
		}
		for i := range docs + 1 {
			w.Write(le.AppendUint64(buf[:0], uint64(i)))
		}
		return nil
	})
	write(prefix+".bin", func(w *bufio.Writer) error {
		for i := range docs {
			w.WriteByte(byte(1 + i%250))
		}
		return nil
	})
}
