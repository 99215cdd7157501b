package source

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/dataloaderd/dataloaderd/internal/files"
)

// arrowIntTypes are the token types an Arrow column may hold.
var arrowIntTypes = []arrow.DataType{
	arrow.PrimitiveTypes.Int8, arrow.PrimitiveTypes.Uint8, arrow.PrimitiveTypes.Int16, arrow.PrimitiveTypes.Uint16,
	arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Uint32, arrow.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Uint64,
}

// arrowColumnSpec is one column of a test file: its name, type and, per
// record batch, its values as JSON.
type arrowColumnSpec struct {
	name    string
	typ     arrow.DataType
	batches []string
}

// encodeArrow writes the columns as an Arrow IPC file (or stream) and returns
// its bytes. Every column must have the same number of batches.
func encodeArrow(t testing.TB, stream bool, cols ...arrowColumnSpec) []byte {
	t.Helper()
	mem := memory.NewGoAllocator()
	fields := make([]arrow.Field, len(cols))
	for i, c := range cols {
		fields[i] = arrow.Field{Name: c.name, Type: c.typ, Nullable: true}
	}
	schema := arrow.NewSchema(fields, nil)
	var buf bytes.Buffer
	var w interface {
		Write(arrow.RecordBatch) error
		Close() error
	}
	if stream {
		w = ipc.NewWriter(&buf, ipc.WithSchema(schema), ipc.WithAllocator(mem))
	} else {
		fw, err := ipc.NewFileWriter(&buf, ipc.WithSchema(schema), ipc.WithAllocator(mem))
		if err != nil {
			t.Fatal(err)
		}
		w = fw
	}
	for b := range cols[0].batches {
		arrays := make([]arrow.Array, len(cols))
		for i, c := range cols {
			a, _, err := array.FromJSON(mem, c.typ, strings.NewReader(c.batches[b]))
			if err != nil {
				t.Fatalf("column %s batch %d: %v", c.name, b, err)
			}
			arrays[i] = a
		}
		rec := array.NewRecordBatch(schema, arrays, int64(arrays[0].Len()))
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		for _, a := range arrays {
			a.Release()
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// listBatches renders documents, split into batches, as JSON list arrays.
func listBatches(batches ...[][]int32) []string {
	out := make([]string, len(batches))
	for i, b := range batches {
		js, _ := json.Marshal(b)
		out[i] = string(js)
	}
	return out
}

// docBatches renders each document as one record batch of one token per row.
func docBatches(docs [][]int32) []string {
	out := make([]string, len(docs))
	for i, d := range docs {
		js, _ := json.Marshal(d)
		if d == nil {
			js = []byte("[]")
		}
		out[i] = string(js)
	}
	return out
}

func TestArrowListLayout(t *testing.T) {
	b0 := [][]int32{{1, 2, 3}, {}, {4}}
	b1 := [][]int32{{5, 6}, {7, 127}}
	want := [][]int32{{1, 2, 3}, {}, {4}, {5, 6}, {7, 127}}
	for _, elem := range arrowIntTypes {
		for _, large := range []bool{false, true} {
			for _, stream := range []bool{false, true} {
				typ := arrow.DataType(arrow.ListOf(elem))
				if large {
					typ = arrow.LargeListOf(elem)
				}
				t.Run(fmt.Sprintf("%s/stream=%v", typ, stream), func(t *testing.T) {
					path := filepath.Join(t.TempDir(), "docs.arrow")
					writeFile(t, path, encodeArrow(t, stream,
						arrowColumnSpec{"id", arrow.BinaryTypes.String, []string{`["a","b","c"]`, `["d","e"]`}},
						arrowColumnSpec{"tokens", typ, listBatches(b0, b1)}))
					src := mustOpen(t, Spec{Name: "a", Path: path, Format: files.Arrow})
					checkUnits(t, src, want)
					if src.Delimited() {
						t.Errorf("Delimited() = true for arrow")
					}
					var offset uint64
					for u, w := range want {
						if got := src.Offset(uint64(u)); got != offset {
							t.Errorf("Offset(%d) = %d, want exactly %d", u, got, offset)
						}
						offset += uint64(len(w))
					}
				})
			}
		}
	}
}

func TestArrowBatchLayout(t *testing.T) {
	want := [][]int32{{1, 2, 3}, {4}, {}, {5, 6, 7, 8}}
	for _, elem := range arrowIntTypes {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", elem, stream), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "ibm.arrow")
				writeFile(t, path, encodeArrow(t, stream, arrowColumnSpec{"tokens", elem, docBatches(want)}))
				src := mustOpen(t, Spec{Name: "ibm", Path: path, Format: files.Arrow})
				checkUnits(t, src, want)
				for u, off := range []uint64{0, 3, 4, 4, 8} {
					if got := src.Offset(uint64(u)); got != off {
						t.Errorf("Offset(%d) = %d, want %d", u, got, off)
					}
				}
			})
		}
	}
}

func TestArrowPathsAndColumn(t *testing.T) {
	dir := t.TempDir()
	col := func(docs ...[]int32) arrowColumnSpec {
		return arrowColumnSpec{"input_ids", arrow.ListOf(arrow.PrimitiveTypes.Int32), listBatches(docs)}
	}
	writeFile(t, filepath.Join(dir, "b.arrow"), encodeArrow(t, false, col([]int32{3})))
	writeFile(t, filepath.Join(dir, "a.arrow"), encodeArrow(t, true, col([]int32{1}, []int32{2, 2})))
	writeFile(t, filepath.Join(dir, "notes.txt"), []byte("x"))
	for _, tc := range []struct {
		name, path string
		want       [][]int32
	}{
		{"directory", dir, [][]int32{{1}, {2, 2}, {3}}},
		{"glob", filepath.Join(dir, "[ab].arrow"), [][]int32{{1}, {2, 2}, {3}}},
		{"file", filepath.Join(dir, "b.arrow"), [][]int32{{3}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := mustOpen(t, Spec{Name: "a", Path: tc.path, Format: files.Arrow, Column: "input_ids"})
			checkUnits(t, src, tc.want)
		})
	}
	_, err := Open(Spec{Name: "a", Path: filepath.Join(dir, "*.feather"), Format: files.Arrow})
	checkInvalid(t, err, "no arrow (.arrow) files found")
}

func TestArrowBadInputs(t *testing.T) {
	list32 := arrow.ListOf(arrow.PrimitiveTypes.Int32)
	for _, tc := range []struct {
		name      string
		data      func(t *testing.T) []byte
		read      uint64 // unit whose read fails; ^0 when Open fails
		fragments []string
	}{
		{"missing column", func(t *testing.T) []byte {
			return encodeArrow(t, false, arrowColumnSpec{"ids", list32, []string{"[[1]]"}},
				arrowColumnSpec{"text", arrow.BinaryTypes.String, []string{`["x"]`}})
		}, ^uint64(0), []string{`no column "tokens"`, `["ids" "text"]`}},
		{"string column", func(t *testing.T) []byte {
			return encodeArrow(t, true, arrowColumnSpec{"tokens", arrow.BinaryTypes.String, []string{`["x"]`}})
		}, ^uint64(0), []string{`column "tokens" has type utf8`, "want list or large_list"}},
		{"list of floats", func(t *testing.T) []byte {
			return encodeArrow(t, false, arrowColumnSpec{"tokens", arrow.ListOf(arrow.PrimitiveTypes.Float32), []string{"[[1.5]]"}})
		}, ^uint64(0), []string{`column "tokens" has type list<item: float32`}},
		{"null document", func(t *testing.T) []byte {
			return encodeArrow(t, false, arrowColumnSpec{"tokens", list32, []string{"[[1]]", "[[2], null]"}})
		}, ^uint64(0), []string{`column "tokens", record batch 1: 1 null rows`}},
		{"null token", func(t *testing.T) []byte {
			return encodeArrow(t, true, arrowColumnSpec{"tokens", list32, []string{"[[1, null]]"}})
		}, ^uint64(0), []string{`column "tokens", record batch 0: 1 null tokens`}},
		{"negative token", func(t *testing.T) []byte {
			return encodeArrow(t, false, arrowColumnSpec{"tokens", arrow.ListOf(arrow.PrimitiveTypes.Int8), []string{"[[1], [2]]", "[[3, -4]]"}})
		}, 2, []string{`column "tokens", row 2 (record batch 1, row 0), token 1: int8 value -4`}},
		{"token beyond int32", func(t *testing.T) []byte {
			return encodeArrow(t, false, arrowColumnSpec{"tokens", arrow.LargeListOf(arrow.PrimitiveTypes.Uint64), []string{"[[1, 2, 18446744073709551615]]"}})
		}, 0, []string{`row 0 (record batch 0, row 0), token 2: uint64 value 18446744073709551615`}},
		{"batch layout token beyond int32", func(t *testing.T) []byte {
			return encodeArrow(t, true, arrowColumnSpec{"tokens", arrow.PrimitiveTypes.Int64, []string{"[1]", "[5, 2147483648]"}})
		}, 1, []string{`column "tokens", record batch 1 (document 1), row 1, token 1: int64 value 2147483648`}},
		{"not arrow", func(*testing.T) []byte { return []byte("hello, this is not an arrow file at all") },
			^uint64(0), []string{"not a readable Arrow IPC file or stream"}},
		{"empty file", func(*testing.T) []byte { return nil }, ^uint64(0), []string{"not a readable Arrow IPC"}},
		{"truncated file", func(t *testing.T) []byte {
			b := encodeArrow(t, false, arrowColumnSpec{"tokens", list32, []string{"[[1, 2]]"}})
			return b[:len(b)-20]
		}, ^uint64(0), []string{"not a readable Arrow IPC file"}},
		{"truncated stream", func(t *testing.T) []byte {
			b := encodeArrow(t, true, arrowColumnSpec{"tokens", list32, []string{"[[1, 2]]", "[[3]]"}})
			return b[:len(b)-20]
		}, ^uint64(0), []string{"record batch 1", "bytes left"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bad.arrow")
			writeFile(t, path, tc.data(t))
			src, err := Open(Spec{Name: "bad", Path: path, Format: files.Arrow})
			if tc.read == ^uint64(0) {
				checkInvalid(t, err, append(tc.fragments, path, `dataset "bad"`)...)
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer src.Close()
			n, err := src.UnitLen(tc.read)
			if err != nil {
				t.Fatal(err)
			}
			err = src.Read(tc.read, 0, make([]int32, n))
			checkInvalid(t, err, append(tc.fragments, path, `dataset "bad"`)...)
		})
	}
}

// TestArrowOpenReadsOnlyMetadata checks the zero-build promise: Open decodes
// each record batch's metadata once and reads no token; a bad token in the
// middle is only found when its document is read.
func TestArrowOpenReadsOnlyMetadata(t *testing.T) {
	const batches, rows = 50, 1000
	docs := make([]string, batches)
	for b := range docs {
		var sb strings.Builder
		sb.WriteString("[")
		for r := range rows {
			if r > 0 {
				sb.WriteString(",")
			}
			tok := b*rows + r
			if b == batches/2 && r == rows/2 {
				tok = -1
			}
			fmt.Fprintf(&sb, "[%d, 7]", tok)
		}
		sb.WriteString("]")
		docs[b] = sb.String()
	}
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "big.arrow")
			writeFile(t, path, encodeArrow(t, stream, arrowColumnSpec{"tokens", arrow.ListOf(arrow.PrimitiveTypes.Int32), docs}))
			seen := 0
			arrowBatchHook = func(string, int) { seen++ }
			defer func() { arrowBatchHook = nil }()
			src := mustOpen(t, Spec{Name: "big", Path: path, Format: files.Arrow})
			if seen != batches {
				t.Errorf("Open described %d record batches, want each of the %d once", seen, batches)
			}
			if src.Units() != batches*rows || src.Tokens() != 2*batches*rows {
				t.Errorf("Units, Tokens = %d, %d; want %d, %d", src.Units(), src.Tokens(), batches*rows, 2*batches*rows)
			}
			bad := uint64(batches/2*rows + rows/2)
			checkInvalid(t, src.Read(bad, 0, make([]int32, 2)), fmt.Sprintf("row %d", bad), "int32 value -1")
			if err := src.Read(bad+1, 0, make([]int32, 2)); err != nil {
				t.Errorf("Read of the next document: %v", err)
			}
		})
	}
}

func TestArrowCompressedBuffersRefused(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{{Name: "tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)}}, nil)
	a, _, err := array.FromJSON(memory.DefaultAllocator, schema.Field(0).Type, strings.NewReader("[[1, 2, 3]]"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	rec := array.NewRecordBatch(schema, []arrow.Array{a}, 1)
	defer rec.Release()
	var buf bytes.Buffer
	w, err := ipc.NewFileWriter(&buf, ipc.WithSchema(schema), ipc.WithZstd())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "zstd.arrow")
	writeFile(t, path, buf.Bytes())
	_, err = Open(Spec{Name: "z", Path: path, Format: files.Arrow})
	checkInvalid(t, err, path, "compressed record batches are not supported")
}
