package testcorpus

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/klauspost/compress/zstd"
)

// Text renders a document as the text the Ints tokenizer turns back into
// it: its token values separated by spaces.
func Text(doc []int32) string {
	words := make([]string, len(doc))
	for i, tok := range doc {
		words[i] = strconv.Itoa(int(tok))
	}
	return strings.Join(words, " ")
}

// Compression is how JSONL compresses a file.
type Compression int

// Compressions JSONL writes.
const (
	Plain Compression = iota
	Gzip
	Zstd
)

// JSONL writes docs to path as JSONL records {"id": i, "text": Text(doc)},
// compressed as asked.
func JSONL(t testing.TB, path string, docs [][]int32, c Compression) {
	t.Helper()
	var b bytes.Buffer
	for i, d := range docs {
		line, err := json.Marshal(map[string]any{"id": i, "text": Text(d)})
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	data := b.Bytes()
	switch c {
	case Gzip:
		var z bytes.Buffer
		w := gzip.NewWriter(&z)
		if _, err := w.Write(data); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		data = z.Bytes()
	case Zstd:
		w, err := zstd.NewWriter(nil)
		if err != nil {
			t.Fatal(err)
		}
		data = w.EncodeAll(data, nil)
		w.Close()
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Parquet writes docs to path as a Parquet file with a string column
// "text" (Text(doc) per row), perGroup rows to a row group.
func Parquet(t testing.TB, path string, docs [][]int32, perGroup int) {
	t.Helper()
	mem := memory.NewGoAllocator()
	schema := arrow.NewSchema([]arrow.Field{{Name: "text", Type: arrow.BinaryTypes.String}}, nil)
	var buf bytes.Buffer
	props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd))
	w, err := pqarrow.NewFileWriter(schema, &buf, props, pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	for start := 0; start < len(docs); start += perGroup {
		b := array.NewStringBuilder(mem)
		for _, d := range docs[start:min(start+perGroup, len(docs))] {
			b.Append(Text(d))
		}
		col := b.NewArray()
		rec := array.NewRecordBatch(schema, []arrow.Array{col}, int64(col.Len()))
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		col.Release()
		b.Release()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
