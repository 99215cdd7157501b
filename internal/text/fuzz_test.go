package text

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/files"
)

// FuzzJSONLBlocks checks the plain JSONL splitter: units tile the file, each
// starts at a line start, and together they give every record once, in order.
func FuzzJSONLBlocks(f *testing.F) {
	f.Add(jsonlLines("text", []string{"a", "bc", "", "déf"}), uint16(3))
	f.Add([]byte("{\"text\":\"x\"}\n\n{\"text\":1}\nnot json\n{\"text\":\"y\"}"), uint16(1))
	f.Add([]byte("{\"text\":\"a\\u00e9\\ud83d\\ude00\"}\r\n"), uint16(64))
	f.Fuzz(func(t *testing.T, data []byte, block uint16) {
		if bytes.HasPrefix(data, gzipMagic) || bytes.HasPrefix(data, zstdMagic) {
			return
		}
		path := filepath.Join(t.TempDir(), "f.jsonl")
		writeFile(t, path, data)
		ds, err := Open(Spec{Name: "fuzz", Path: path, Format: files.JSONL, BlockBytes: uint64(block), OnBadRecord: OnBadRecordSkip})
		if err != nil {
			t.Fatal(err)
		}
		defer ds.Close()
		file := ds.(*concatDocs).parts[0].(*jsonlFile)
		var end uint64
		for b := range file.units() {
			start, stop, err := file.unitRange(b)
			if err != nil {
				t.Fatal(err)
			}
			if start != end || stop < start {
				t.Fatalf("unit %d is [%d, %d), previous unit ended at %d", b, start, stop, end)
			}
			if start > 0 && start < uint64(len(data)) && data[start-1] != '\n' {
				t.Fatalf("unit %d starts at byte %d, not after a newline", b, start)
			}
			end = stop
		}
		if end != uint64(len(data)) {
			t.Fatalf("units end at %d, file has %d bytes", end, len(data))
		}
		var want []string
		bad := 0
		for _, line := range bytes.Split(data, []byte{'\n'}) {
			text, reason := parseRecord(line, "text")
			switch {
			case reason != "":
				bad++
			case text != nil:
				want = append(want, string(text))
			}
		}
		var got []string
		for u := range ds.Units() {
			if err := ds.Docs(u, func(text []byte) error { got = append(got, string(text)); return nil }); err != nil {
				t.Fatal(err)
			}
		}
		if len(got) != len(want) || ds.Skipped() != uint64(bad) {
			t.Fatalf("%d documents and %d skipped, want %d and %d", len(got), ds.Skipped(), len(want), bad)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("document %d = %q, want %q", i, got[i], want[i])
			}
		}
	})
}
