package text

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet"

	"github.com/dataloaderd/dataloaderd/internal/files"
)

// sampleTexts are documents of varied lengths, some with escapes and
// non-ASCII text.
func sampleTexts(n int, seed uint64) []string {
	rng := rand.New(rand.NewPCG(seed, 7))
	words := []string{"alpha", "béta", "γάμμα", "delta\n", "\"quoted\"", "tab\there", "😀", "z"}
	texts := make([]string, n)
	for i := range texts {
		var b strings.Builder
		for range rng.IntN(40) {
			b.WriteString(words[rng.IntN(len(words))])
			b.WriteByte(' ')
		}
		texts[i] = b.String()
	}
	return texts
}

func TestJSONLPlainBlocks(t *testing.T) {
	texts := sampleTexts(200, 1)
	data := jsonlLines("text", texts)
	path := filepath.Join(t.TempDir(), "docs.jsonl")
	writeFile(t, path, data)
	for _, block := range []uint64{1, 7, 100, 1000, 1 << 20} {
		t.Run(fmt.Sprint("block", block), func(t *testing.T) {
			ds := mustOpen(t, Spec{Name: "j", Path: path, Format: files.JSONL, BlockBytes: block})
			if want := (uint64(len(data)) + block - 1) / block; ds.Units() != want {
				t.Errorf("Units() = %d, want %d", ds.Units(), want)
			}
			if ds.Bytes() != uint64(len(data)) {
				t.Errorf("Bytes() = %d, want the file's %d", ds.Bytes(), len(data))
			}
			checkDataset(t, ds, texts)
		})
	}
}

func TestJSONLCompressed(t *testing.T) {
	texts := sampleTexts(300, 2)
	data := jsonlLines("body", texts)
	multi := slices.Concat(gzipBytes(t, data[:len(data)/2]), gzipBytes(t, data[len(data)/2:]))
	for _, tc := range []struct {
		name string
		file []byte
		hint int // the size hint of the header: the last gzip member's size
	}{
		{"docs.jsonl.gz", gzipBytes(t, data), len(data)},
		{"multi.jsonl.gz", multi, len(data) - len(data)/2},
		{"docs.jsonl.zst", zstdBytes(t, data), len(data)},
		{"no-extension.jsonl", zstdBytes(t, data), len(data)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), tc.name)
			writeFile(t, path, tc.file)
			ds := mustOpen(t, Spec{Name: "z", Path: path, Format: files.JSONL, Field: "body", BlockBytes: 10})
			if want := uint64(tc.hint+9) / 10; ds.Units() != want || ds.Bytes() != uint64(tc.hint) {
				t.Errorf("Units, Bytes = %d, %d; want %d, the hinted text size %d", ds.Units(), ds.Bytes(), want, tc.hint)
			}
			if last := ds.Units() - 1; ds.Offset(last) != last*10 || ds.Offset(ds.Units()) != uint64(tc.hint) {
				t.Errorf("Offset(%d), Offset(%d) = %d, %d; want %d, %d", last, last+1, ds.Offset(last), ds.Offset(last+1), last*10, tc.hint)
			}
			checkDataset(t, ds, texts)
		})
	}
}

func TestJSONLPathsMixed(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.jsonl"), jsonlLines("text", []string{"a1", "a2"}))
	writeFile(t, filepath.Join(dir, "b.jsonl.gz"), gzipBytes(t, jsonlLines("text", []string{"b1"})))
	writeFile(t, filepath.Join(dir, "c.ndjson.zst"), zstdBytes(t, jsonlLines("text", []string{"c1", "c2"})))
	writeFile(t, filepath.Join(dir, "notes.txt"), []byte("not data"))
	ds := mustOpen(t, Spec{Name: "mixed", Path: dir, Format: files.JSONL})
	checkDataset(t, ds, []string{"a1", "a2", "b1", "c1", "c2"})
	if n := len(ds.Files()); n != 3 {
		t.Errorf("Files() has %d files, want 3", n)
	}
	ds = mustOpen(t, Spec{Name: "glob", Path: filepath.Join(dir, "*.gz"), Format: files.JSONL})
	checkDataset(t, ds, []string{"b1"})
}

func TestJSONLBadRecords(t *testing.T) {
	good := `{"text": "fine"}`
	for _, tc := range []struct {
		name, line string
		fragments  []string
	}{
		{"malformed JSON", `{"text": "unterminated}`, []string{"malformed JSON"}},
		{"not an object", `["text"]`, []string{"a JSON array, want an object"}},
		{"missing field", `{"body": "x"}`, []string{`field "text": missing`}},
		{"number field", `{"text": 12}`, []string{`field "text": is a number, want a string`}},
		{"null field", `{"text": null}`, []string{`field "text": is null, want a string`}},
		{"invalid UTF-8", "{\"text\": \"ab\xff\"}", []string{"is not valid UTF-8 (invalid byte at offset 2"}},
		{"lone surrogate", `{"text": "a\ud800b"}`, []string{`lone surrogate \ud800`}},
	} {
		content := []byte(good + "\n\n" + tc.line + "\n" + good + "\n")
		badAt := len(good) + 2
		for _, kind := range []string{"plain", "gz", "zst"} {
			t.Run(tc.name+"/"+kind, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "bad.jsonl")
				where := fmt.Sprintf("byte %d", badAt)
				switch kind {
				case "gz":
					writeFile(t, path, gzipBytes(t, content))
					where = fmt.Sprintf("line 3 (byte %d)", badAt)
				case "zst":
					writeFile(t, path, zstdBytes(t, content))
					where = fmt.Sprintf("line 3 (byte %d)", badAt)
				default:
					writeFile(t, path, content)
				}
				ds := mustOpen(t, Spec{Name: "bad", Path: path, Format: files.JSONL})
				err := ds.Docs(0, func([]byte) error { return nil })
				checkInvalid(t, err, append(tc.fragments, path, `dataset "bad"`, where, `field "text"`)...)

				var mu sync.Mutex
				var logged []error
				ds = mustOpen(t, Spec{Name: "bad", Path: path, Format: files.JSONL, OnBadRecord: OnBadRecordSkip,
					OnSkip: func(err error) { mu.Lock(); logged = append(logged, err); mu.Unlock() }})
				for range 3 {
					checkDataset(t, ds, []string{"fine", "fine"})
				}
				if ds.Skipped() != 1 || len(logged) != 1 {
					t.Errorf("Skipped() = %d, OnSkip called %d times; want each 1 after 3 reads", ds.Skipped(), len(logged))
				}
			})
		}
	}
}

func TestUnquoteMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{``, `plain`, `a\"b\\c\/d`, `\b\f\n\r\t`, `\u00e9\u4e2d`, `\ud83d\ude00`, `é😀`} {
		got, err := unquote([]byte(`"` + s + `"`))
		if err != nil {
			t.Errorf("unquote(%q): %v", s, err)
			continue
		}
		text, reason := parseRecord([]byte(`{"text":"`+s+`"}`), "text")
		if reason != "" || !bytes.Equal(text, got) {
			t.Errorf("parseRecord of %q = %q, %q; want %q", s, text, reason, got)
		}
	}
}

func TestParquetRowGroups(t *testing.T) {
	groups := [][]string{sampleTexts(50, 3), sampleTexts(1, 4), {}, sampleTexts(120, 5)}
	for _, typ := range []arrow.DataType{arrow.BinaryTypes.String, arrow.BinaryTypes.LargeString, arrow.BinaryTypes.Binary} {
		t.Run(typ.String(), func(t *testing.T) {
			col := parquetColumn{name: "content", typ: typ}
			var want []string
			for _, g := range groups {
				want = append(want, g...)
				if typ.ID() == arrow.BINARY {
					encoded := make([][]byte, len(g))
					for i, s := range g {
						encoded[i] = []byte(s)
					}
					col.rows = append(col.rows, mustJSON(encoded))
				} else {
					col.rows = append(col.rows, mustJSON(g))
				}
			}
			path := filepath.Join(t.TempDir(), "docs.parquet")
			writeParquet(t, path, col)
			ds := mustOpen(t, Spec{Name: "p", Path: path, Format: files.Parquet, Field: "content"})
			if ds.Units() != uint64(len(groups)) {
				t.Fatalf("Units() = %d, want one per row group, %d", ds.Units(), len(groups))
			}
			units := checkDataset(t, ds, want)
			for g := range groups {
				if len(units[g]) != len(groups[g]) {
					t.Errorf("unit %d has %d documents, want row group %d's %d", g, len(units[g]), g, len(groups[g]))
				}
			}
			if ds.Offset(1) == 0 || ds.Offset(3) <= ds.Offset(1) {
				t.Errorf("offsets %d, %d, %d do not follow the row groups' sizes", ds.Offset(1), ds.Offset(2), ds.Offset(3))
			}
		})
	}
}

func mustJSON(v any) string {
	var b bytes.Buffer
	enc := jsonEncoder(&b)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return b.String()
}

func TestParquetBadInputs(t *testing.T) {
	dir := t.TempDir()
	nulls := filepath.Join(dir, "nulls.parquet")
	writeParquet(t, nulls, parquetColumn{"text", arrow.BinaryTypes.String, []string{`["a"]`, `["b", null, "c"]`}})
	binary := filepath.Join(dir, "binary.parquet")
	writeParquet(t, binary, parquetColumn{"text", arrow.BinaryTypes.Binary, []string{`["YQ==", "/w=="]`}}) // "a", "\xff"
	numbers := filepath.Join(dir, "numbers.parquet")
	writeParquet(t, numbers, parquetColumn{"text", arrow.PrimitiveTypes.Int32, []string{`[1]`}})
	lists := filepath.Join(dir, "lists.parquet")
	writeParquet(t, lists, parquetColumn{"text", arrow.ListOf(arrow.BinaryTypes.String), []string{`[["a"]]`}})
	garbage := filepath.Join(dir, "garbage.parquet")
	writeFile(t, garbage, []byte("this is not a parquet file, not at all"))

	for _, tc := range []struct {
		name, path, field string
		fragments         []string
	}{
		{"missing column", nulls, "body", []string{`no column "body"`, `columns present: ["n" "text"]`}},
		{"int column", numbers, "text", []string{`column "text" is INT32`, "want a string or binary column"}},
		{"list column", lists, "text.list.element", []string{"want a string or binary column"}},
		{"not parquet", garbage, "text", []string{"not a readable Parquet file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(Spec{Name: "pq", Path: tc.path, Format: files.Parquet, Field: tc.field})
			checkInvalid(t, err, append(tc.fragments, tc.path, `dataset "pq"`)...)
		})
	}
	for _, tc := range []struct {
		name, path string
		unit       uint64
		want       []string
		fragments  []string
	}{
		{"null text", nulls, 1, []string{"b", "c"}, []string{"row group 1, row 1", `field "text": is null`}},
		{"non-UTF-8 binary", binary, 0, []string{"a"}, []string{"row group 0, row 1", "is not valid UTF-8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := mustOpen(t, Spec{Name: "pq", Path: tc.path, Format: files.Parquet})
			err := ds.Docs(tc.unit, func([]byte) error { return nil })
			checkInvalid(t, err, append(tc.fragments, tc.path)...)
			ds = mustOpen(t, Spec{Name: "pq", Path: tc.path, Format: files.Parquet, OnBadRecord: OnBadRecordSkip})
			var got []string
			if err := ds.Docs(tc.unit, func(b []byte) error { got = append(got, string(b)); return nil }); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) || ds.Skipped() != 1 {
				t.Errorf("skipping: docs %q, Skipped() %d; want %q, 1", got, ds.Skipped(), tc.want)
			}
		})
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	parquet.ReaderAtSeeker
	mu    sync.Mutex
	bytes int64
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.ReaderAtSeeker.ReadAt(p, off)
	c.mu.Lock()
	c.bytes += int64(n)
	c.mu.Unlock()
	return n, err
}

// TestParquetOpenReadsOnlyTheFooter checks the zero-build promise: opening a
// Parquet file reads its footer, not its row groups.
func TestParquetOpenReadsOnlyTheFooter(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	letters := make([]byte, 50000)
	for i := range letters {
		letters[i] = 'a' + byte(rng.IntN(26))
	}
	big := string(letters)
	var col parquetColumn
	col.name, col.typ = "text", arrow.BinaryTypes.String
	var want []string
	for g := range 20 {
		rows := make([]string, 20)
		for i := range rows {
			at := rng.IntN(len(big) / 2)
			rows[i] = fmt.Sprintf("%d.%d %s", g, i, big[at:at+len(big)/2])
		}
		want = append(want, rows...)
		col.rows = append(col.rows, mustJSON(rows))
	}
	path := filepath.Join(t.TempDir(), "big.parquet")
	writeParquet(t, path, col)
	var readers []*countingReader
	saved := newReaderAt
	newReaderAt = func(data []byte) parquet.ReaderAtSeeker {
		r := &countingReader{ReaderAtSeeker: bytes.NewReader(data)}
		readers = append(readers, r)
		return r
	}
	defer func() { newReaderAt = saved }()
	ds := mustOpen(t, Spec{Name: "big", Path: path, Format: files.Parquet})
	opened := readers[0].bytes
	size := ds.Files()[0].Size
	if opened > 64<<10 || opened*20 > size {
		t.Errorf("Open read %d bytes of a %d-byte file; want the footer only", opened, size)
	}
	if ds.Bytes() < uint64(len(want)*len(big)/2) {
		t.Errorf("Bytes() = %d, less than the %d bytes of text", ds.Bytes(), len(want)*len(big)/2)
	}
	checkDataset(t, ds, want)
	t.Logf("open read %d of %d bytes", opened, size)
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.jsonl"), []byte(`{"text":"x"}`+"\n"))
	for _, tc := range []struct {
		name      string
		spec      Spec
		fragments []string
	}{
		{"unknown format", Spec{Path: dir, Format: "csv"}, []string{`format "csv"`, `"parquet"`, `"jsonl"`}},
		{"bad policy", Spec{Path: dir, Format: files.JSONL, OnBadRecord: "ignore"}, []string{`on_bad_record "ignore"`, `"skip"`}},
		{"no parquet files", Spec{Path: dir, Format: files.Parquet}, []string{"no parquet (.parquet) files found"}},
		{"missing path", Spec{Path: filepath.Join(dir, "nope"), Format: files.JSONL}, []string{"no jsonl"}},
		{"bad glob", Spec{Path: filepath.Join(dir, "[x"), Format: files.JSONL}, []string{"syntax error in pattern"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.Name = "ds"
			_, err := Open(tc.spec)
			checkInvalid(t, err, append(tc.fragments, `dataset "ds"`)...)
		})
	}
}

// TestParquetConcurrentReads: goroutines reading the row groups of one
// Parquet file at once (the daemon's tokenizing workers do) each get the
// sequential read's documents (run under -race).
func TestParquetConcurrentReads(t *testing.T) {
	col := parquetColumn{name: "text", typ: arrow.BinaryTypes.String}
	for g := 0; g < 6; g++ {
		col.rows = append(col.rows, mustJSON(sampleTexts(40+g, uint64(10+g))))
	}
	path := filepath.Join(t.TempDir(), "c.parquet")
	writeParquet(t, path, col)
	ds := mustOpen(t, Spec{Name: "p", Path: path, Format: files.Parquet})
	want := unitDocs(t, ds)
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for w := 0; w < 8; w++ {
		wg.Go(func() {
			for round := 0; round < 3; round++ {
				for u := uint64(0); u < ds.Units(); u++ {
					g := (u + uint64(w)) % ds.Units()
					var got []string
					if err := ds.Docs(g, func(b []byte) error { got = append(got, string(b)); return nil }); err != nil {
						errs <- err.Error()
						return
					}
					if !slices.Equal(got, want[g]) {
						errs <- fmt.Sprintf("row group %d read concurrently differs", g)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}
