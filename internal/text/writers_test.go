package text

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/klauspost/compress/zstd"

	"github.com/dataloaderd/dataloaderd/internal/source"
)

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// jsonlLines renders one JSON object per text, {"id": i, field: text}.
func jsonlLines(field string, texts []string) []byte {
	var b bytes.Buffer
	for i, text := range texts {
		line, _ := json.Marshal(map[string]any{"id": i, field: text})
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func gzipBytes(t testing.TB, data []byte) []byte {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func zstdBytes(t testing.TB, data []byte) []byte {
	w, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	return w.EncodeAll(data, nil)
}

// parquetColumn is a Parquet test file's text column: each row group's
// values as JSON (null allowed).
type parquetColumn struct {
	name string
	typ  arrow.DataType
	rows []string
}

// writeParquet writes one row group per entry of each column's rows, with a
// second int64 column "n" beside them, zstd-compressed.
func writeParquet(t testing.TB, path string, col parquetColumn) {
	t.Helper()
	mem := memory.NewGoAllocator()
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "n", Type: arrow.PrimitiveTypes.Int64},
		{Name: col.name, Type: col.typ, Nullable: true},
	}, nil)
	var buf bytes.Buffer
	props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd), parquet.WithDictionaryDefault(false))
	w, err := pqarrow.NewFileWriter(schema, &buf, props, pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	for _, rows := range col.rows {
		texts, _, err := array.FromJSON(mem, col.typ, strings.NewReader(rows))
		if err != nil {
			t.Fatal(err)
		}
		nb := array.NewInt64Builder(mem)
		for i := range texts.Len() {
			nb.Append(int64(i))
		}
		ns := nb.NewArray()
		rec := array.NewRecordBatch(schema, []arrow.Array{ns, texts}, int64(texts.Len()))
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		ns.Release()
		texts.Release()
		nb.Release()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, buf.Bytes())
}

func mustOpen(t testing.TB, spec Spec) Dataset {
	t.Helper()
	ds, err := Open(spec)
	if err != nil {
		t.Fatalf("Open(%+v): %v", spec, err)
	}
	t.Cleanup(func() {
		if err := ds.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return ds
}

// unitDocs reads every unit's documents.
func unitDocs(t testing.TB, ds Dataset) [][]string {
	t.Helper()
	var units [][]string
	for u := range ds.Units() {
		var docs []string
		if err := ds.Docs(u, func(text []byte) error { docs = append(docs, string(text)); return nil }); err != nil {
			t.Fatalf("Docs(%d): %v", u, err)
		}
		units = append(units, docs)
	}
	return units
}

// checkDataset is the suite every text Dataset passes: its units hold want in
// order, and offsets are monotone from 0 to Bytes().
func checkDataset(t *testing.T, ds Dataset, want []string) [][]string {
	t.Helper()
	units := unitDocs(t, ds)
	if got := slices.Concat(units...); !slices.Equal(got, want) {
		t.Errorf("documents = %q, want %q", got, want)
	}
	if ds.Offset(0) != 0 || ds.Offset(ds.Units()) != ds.Bytes() {
		t.Errorf("Offset(0), Offset(Units()) = %d, %d; want 0, Bytes() = %d", ds.Offset(0), ds.Offset(ds.Units()), ds.Bytes())
	}
	for u := range ds.Units() {
		if ds.Offset(u) > ds.Offset(u+1) {
			t.Errorf("Offset(%d) = %d > Offset(%d) = %d", u, ds.Offset(u), u+1, ds.Offset(u+1))
		}
	}
	if err := ds.Docs(ds.Units(), func([]byte) error { return nil }); err == nil {
		t.Errorf("Docs(Units()) succeeded")
	}
	return units
}

// checkInvalid asserts that err wraps source.ErrInvalid and mentions every fragment.
func checkInvalid(t *testing.T, err error, fragments ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one mentioning %q", fragments)
	}
	if !errors.Is(err, source.ErrInvalid) {
		t.Errorf("error %q does not wrap source.ErrInvalid", err)
	}
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error %q does not mention %q", err, f)
		}
	}
}

func jsonEncoder(w io.Writer) *json.Encoder {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc
}
