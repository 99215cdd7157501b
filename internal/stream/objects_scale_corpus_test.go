package stream

import (
	"bufio"
	"encoding/binary"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/objstore/s3test"
)

// scaleBucket holds BenchmarkObjectsScale's corpora.
const scaleBucket = "scale"

// megatronHeaderBytes is a Megatron index's header: magic (9 bytes),
// version (8), dtype (1), sequence count (8), document count (8).
const megatronHeaderBytes = 34

// scaleCorpus is one Megatron corpus of BenchmarkObjectsScale on the
// test server, as s3://scale/KEY.bin and .idx, or in local files at
// local.bin and .idx.
type scaleCorpus struct {
	key, local         string
	docs, tokens       int64
	binBytes, idxBytes int64
}

// path is the dataset's path in a config.
func (c scaleCorpus) path() string {
	if c.local != "" {
		return c.local
	}
	return "s3://" + scaleBucket + "/" + c.key
}

// bytes is the corpus's size: its .bin and its .idx.
func (c scaleCorpus) bytes() int64 { return c.binBytes + c.idxBytes }

// readBytes is what an epoch must read of the corpus: every token of the
// .bin once, and of the .idx its header and each document's entry, the
// length (4 bytes) and the pointer (8) the readers look up; not the
// document index (8 bytes a document), which nothing reads.
func (c scaleCorpus) readBytes() int64 { return c.binBytes + megatronHeaderBytes + 12*c.docs }

// writeScaleCorpus writes a Megatron corpus of int32 tokens in documents
// of 1 to 4000 tokens (uniform; 2,000 on average), until its .bin holds
// binBytes or more, to local files as it goes (never the corpus in
// memory: only the documents' lengths), uploads them to srv as
// s3://scale/KEY.{bin,idx} and removes them.
func writeScaleCorpus(b *testing.B, srv *s3test.Server, key string, binBytes int64) scaleCorpus {
	b.Helper()
	prefix := filepath.Join(b.TempDir(), "corpus")
	c := writeScaleFiles(b, prefix, binBytes, false)
	c.key = key
	for _, ext := range []string{".bin", ".idx"} {
		srv.PutFile(b, scaleBucket, key+ext, prefix+ext)
		if err := os.Remove(prefix + ext); err != nil {
			b.Fatal(err)
		}
	}
	return c
}

// writeScaleFiles writes writeScaleCorpus's files at prefix.bin and .idx;
// sparse, the .bin is a hole of its size (for a plan, which reads the
// index alone).
func writeScaleFiles(b *testing.B, prefix string, binBytes int64, sparse bool) scaleCorpus {
	b.Helper()
	var c scaleCorpus
	rng := rand.New(rand.NewSource(binBytes))
	var lengths []int32
	writeScaleFile(b, prefix+".bin", func(w *bufio.Writer) {
		doc := make([]byte, 4*4000)
		for c.tokens*4 < binBytes {
			n := 1 + rng.Intn(4000)
			lengths = append(lengths, int32(n))
			c.tokens += int64(n)
			if sparse {
				continue
			}
			for i := range n {
				binary.LittleEndian.PutUint32(doc[4*i:], uint32(1+(c.tokens-int64(n)+int64(i))%60000))
			}
			w.Write(doc[:4*n])
		}
	})
	if sparse {
		if err := os.Truncate(prefix+".bin", 4*c.tokens); err != nil {
			b.Fatal(err)
		}
	}
	c.docs = int64(len(lengths))
	writeScaleFile(b, prefix+".idx", func(w *bufio.Writer) { writeScaleIndex(w, lengths) })
	for _, f := range []struct {
		ext  string
		size *int64
	}{{".bin", &c.binBytes}, {".idx", &c.idxBytes}} {
		fi, err := os.Stat(prefix + f.ext)
		if err != nil {
			b.Fatal(err)
		}
		*f.size = fi.Size()
	}
	return c
}

// writeScaleIndex writes the .idx of int32 documents of lengths.
func writeScaleIndex(w *bufio.Writer, lengths []int32) {
	le := binary.LittleEndian
	var buf [8]byte
	w.WriteString("MMIDIDX\x00\x00")
	w.Write(le.AppendUint64(buf[:0], 1))
	w.WriteByte(4) // int32
	w.Write(le.AppendUint64(buf[:0], uint64(len(lengths))))
	w.Write(le.AppendUint64(buf[:0], uint64(len(lengths)+1)))
	for _, n := range lengths {
		w.Write(le.AppendUint32(buf[:0], uint32(n)))
	}
	var ptr uint64
	for _, n := range lengths {
		w.Write(le.AppendUint64(buf[:0], ptr))
		ptr += 4 * uint64(n)
	}
	for i := range len(lengths) + 1 {
		w.Write(le.AppendUint64(buf[:0], uint64(i)))
	}
}

// writeScaleFile creates path and fills it through a buffered writer.
func writeScaleFile(b *testing.B, path string, fill func(w *bufio.Writer)) {
	b.Helper()
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	fill(w)
	if err := w.Flush(); err != nil {
		b.Fatalf("write %s: %v", path, err)
	}
	if err := f.Close(); err != nil {
		b.Fatalf("write %s: %v", path, err)
	}
}

// resetPeakRSS collects the garbage, returns the freed memory to the
// system, and resets the process's peak resident set (VmHWM) to its
// resident set now; false where the kernel does not allow it.
func resetPeakRSS() bool {
	runtime.GC()
	debug.FreeOSMemory()
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// peakRSS is the process's peak resident set (VmHWM) in bytes, since the
// last resetPeakRSS; 0 when it cannot be read.
func peakRSS() int64 { return procStatusBytes("VmHWM:") }

// procStatusBytes reads a field of /proc/self/status given in kB.
func procStatusBytes(field string) int64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
