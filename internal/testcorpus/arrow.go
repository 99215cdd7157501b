package testcorpus

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Arrow writes docs as an Arrow IPC file dir/name.arrow with one row per
// document in a list<int32> column "tokens", perBatch documents to a record
// batch, and returns its path.
func Arrow(t testing.TB, dir, name string, docs [][]int32, perBatch int) string {
	t.Helper()
	mem := memory.NewGoAllocator()
	schema := arrow.NewSchema([]arrow.Field{{Name: "tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)}}, nil)
	path := filepath.Join(dir, name+".arrow")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := ipc.NewFileWriter(f, ipc.WithSchema(schema), ipc.WithAllocator(mem))
	if err != nil {
		t.Fatal(err)
	}
	for start := 0; start < len(docs); start += perBatch {
		b := array.NewListBuilder(mem, arrow.PrimitiveTypes.Int32)
		values := b.ValueBuilder().(*array.Int32Builder)
		for _, d := range docs[start:min(start+perBatch, len(docs))] {
			b.Append(true)
			values.AppendValues(d, nil)
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
	return path
}
