package text

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/dataloaderd/dataloaderd/internal/files"
)

// zstdStream compresses data as the zstd command does from a pipe: the
// frame header does not record the content size.
func zstdStream(t testing.TB, data []byte) []byte {
	var b bytes.Buffer
	w, err := zstd.NewWriter(&b)
	if err != nil {
		t.Fatal(err)
	}
	for len(data) > 0 { // in pieces, as a stream
		n := min(len(data), 1000)
		if _, err := w.Write(data[:n]); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		data = data[n:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// openZ opens one compressed JSONL file as a dataset, with its size hint
// replaced by hint when hint is not 0.
func openZ(t testing.TB, path string, block, hint uint64) (*concatDocs, *zjsonlFile) {
	t.Helper()
	spec := Spec{Name: "z", Path: path, Format: files.JSONL, BlockBytes: block}
	pool := newDecoderPool(0)
	p, err := openJSONLFile(files.Dataset{Name: spec.Name}, path, DefaultField, block, pool)
	if err != nil {
		t.Fatal(err)
	}
	z, ok := p.(*zjsonlFile)
	if !ok {
		t.Fatalf("%s: not opened as a compressed file", path)
	}
	if hint != 0 {
		z.hint = hint
		z.setUnits()
	}
	d := newConcatDocs(spec, []part{z})
	d.pool = pool
	t.Cleanup(func() { d.Close() })
	return d, z
}

func TestCompressedHints(t *testing.T) {
	texts := sampleTexts(400, 3)
	data := jsonlLines("text", texts)
	dir := t.TempDir()
	const block = 1000
	units := uint64(len(data)+block-1) / block
	// Highly compressible text: more than MaxHintRatio times smaller.
	dull := jsonlLines("text", []string{strings.Repeat("a", 4<<20)})
	gz := gzipBytes(t, data)
	badTrailer := func(isize uint32) []byte {
		b := slices.Clone(gz)
		binary.LittleEndian.PutUint32(b[len(b)-4:], isize)
		return b
	}
	for _, tc := range []struct {
		name  string
		file  []byte
		units uint64 // 1: read whole
	}{
		{"fcs.jsonl.zst", zstdBytes(t, data), units},
		{"nofcs.jsonl.zst", zstdStream(t, data), 1},
		{"isize.jsonl.gz", gz, units},
		{"dull.jsonl.zst", zstdBytes(t, dull), 1},
		{"dull.jsonl.gz", gzipBytes(t, dull), 1},
		{"small-isize.jsonl.gz", badTrailer(uint32(len(gz) - 1)), 1},
		{"huge-isize.jsonl.gz", badTrailer(uint32(len(gz)*MaxHintRatio + 1)), 1},
		{"tiny.jsonl.gz", gzipBytes(t, jsonlLines("text", []string{"x"})), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name)
			writeFile(t, path, tc.file)
			ds := mustOpen(t, Spec{Name: "z", Path: path, Format: files.JSONL, BlockBytes: block})
			if ds.Units() != tc.units {
				t.Errorf("Units() = %d, want %d", ds.Units(), tc.units)
			}
			st := ds.Compressed()
			whole := uint64(0)
			if tc.units == 1 {
				whole = 1
			}
			if st.Files != 1 || st.Whole != whole {
				t.Errorf("Compressed() = %+v, want 1 file, %d whole", st, whole)
			}
			if !strings.HasPrefix(tc.name, "dull") && !strings.Contains(tc.name, "isize.") {
				checkDataset(t, ds, unitTexts(t, tc.name, texts))
			}
		})
	}
}

func unitTexts(t testing.TB, name string, texts []string) []string {
	if strings.HasPrefix(name, "tiny") {
		return []string{"x"}
	}
	return texts
}

func TestGzipHintWraps(t *testing.T) {
	const G = uint64(1) << 30
	for _, tc := range []struct {
		text, size uint64 // true sizes
		want       uint64
	}{
		{text: 3 << 20, size: 1 << 20, want: 3 << 20},     // small: the trailer as is
		{text: 900 << 20, size: 1 << 20, want: 900 << 20}, // small, very compressible
		{text: 8*G + G/2, size: 2 * G, want: 8*G + G/2},   // wrapped twice, ratio 4.25
		{text: 5 * G, size: G, want: 5 * G},               // wrapped once, ratio 5
		// 1.5 GiB and 5.5 GiB are both plausible for 1 GiB; 5.5 is nearer
		// to the assumed ratio 5: a hint too large, by design.
		{text: 3 * G / 2, size: G, want: 3*G/2 + 4*G},
	} {
		got := gzipHint(uint32(tc.text), tc.size)
		if got != tc.want {
			t.Errorf("gzipHint(%d mod 2^32, size %d) = %d, want %d", tc.text, tc.size, got, tc.want)
		}
	}
	if got := gzipHint(10, 100); got != 0 {
		t.Errorf("gzipHint below the compressed size = %d, want 0", got)
	}
	// Whether the trailer leaves more than one size at ratios 1.5x to 12x.
	for _, tc := range []struct {
		text, size uint64
		want       bool
	}{
		{3 << 20, 1 << 20, false},     // small files: one size only
		{400 << 20, 100 << 20, false}, // 1.5x-12x of 100 MiB is under 4 GiB: one
		{5 * G, G, true},              // 1.5, 5.5 and 9.5 GiB all fit
		{3 * G / 2, G, true},
		{40 * G, 30 * G, true},
	} {
		if got := gzipAmbiguous(uint32(tc.text), tc.size); got != tc.want {
			t.Errorf("gzipAmbiguous(%d mod 2^32, size %d) = %v, want %v", tc.text, tc.size, got, tc.want)
		}
	}
}

// lineUnits splits data's lines by the rule: unit k < n-1 has the lines
// starting in [k*B, (k+1)*B), the last the rest; it returns each unit's
// texts.
func lineUnits(t testing.TB, data []byte, block, n uint64) [][]string {
	units := make([][]string, n)
	for pos := uint64(0); pos < uint64(len(data)); {
		i := uint64(bytes.IndexByte(data[pos:], '\n'))
		text, reason := parseRecord(data[pos:pos+i], DefaultField)
		if reason != "" {
			t.Fatal(reason)
		}
		k := min(pos/block, n-1)
		units[k] = append(units[k], string(text))
		pos += i + 1
	}
	return units
}

// TestCompressedUnitsPartition: every line is in exactly one unit, the one
// its first byte's offset names, whether the hint is right, too small or
// too large, for zstd and gzip, for units read in order, backwards, or
// skipping some.
func TestCompressedUnitsPartition(t *testing.T) {
	texts := append(sampleTexts(300, 4), strings.Repeat("long line ", 300))
	texts = append(texts, sampleTexts(100, 5)...)
	data := jsonlLines("text", texts)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.jsonl.zst"), zstdBytes(t, data))
	writeFile(t, filepath.Join(dir, "a.jsonl.gz"), gzipBytes(t, data))
	// Two frames: the header's size is the first frame's, too small.
	writeFile(t, filepath.Join(dir, "frames.jsonl.zst"), slices.Concat(zstdBytes(t, data[:len(data)/3]), zstdBytes(t, data[len(data)/3:])))
	size := uint64(len(data))
	for _, file := range []string{"a.jsonl.zst", "a.jsonl.gz", "frames.jsonl.zst"} {
		for _, block := range []uint64{700, 4096} {
			for _, hint := range []uint64{0, size / 3, size + 5*block, 1} {
				t.Run(fmt.Sprintf("%s/B%d/hint%d", file, block, hint), func(t *testing.T) {
					ds, z := openZ(t, filepath.Join(dir, file), block, hint)
					want := lineUnits(t, data, block, z.n)
					if hint == 0 && file != "frames.jsonl.zst" && z.hint != size {
						t.Fatalf("hint %d, want the size %d", z.hint, size)
					}
					got := unitDocs(t, ds)
					for k := range want {
						if !slices.Equal(got[k], want[k]) {
							t.Fatalf("unit %d of %d: %d documents, want %d", k, z.n, len(got[k]), len(want[k]))
						}
					}
					if got := slices.Concat(got...); !slices.Equal(got, texts) {
						t.Fatalf("documents differ from the file's")
					}
					// Backwards, and every third unit: the same units.
					for k := int(z.n) - 1; k >= 0; k -= 1 + k%3 {
						var docs []string
						if err := ds.Docs(uint64(k), func(b []byte) error { docs = append(docs, string(b)); return nil }); err != nil {
							t.Fatal(err)
						}
						if !slices.Equal(docs, want[k]) {
							t.Fatalf("unit %d read out of order differs", k)
						}
					}
				})
			}
		}
	}
}

// TestCompressedSequentialStarts: reading a file's units in order
// decompresses it once, even when workers tokenize the next units while
// a reader reads the current one; reading them backwards starts over for
// every other unit (the counter can fail); reads of text hold about a
// block.
func TestCompressedSequentialStarts(t *testing.T) {
	texts := sampleTexts(3000, 6)
	data := jsonlLines("text", texts)
	path := filepath.Join(t.TempDir(), "a.jsonl.zst")
	writeFile(t, path, zstdBytes(t, data))
	const block = 2000
	longest := 0
	for _, l := range bytes.Split(data, []byte{'\n'}) {
		longest = max(longest, len(l)+1)
	}

	ds, z := openZ(t, path, block, 0)
	if z.n < 20 {
		t.Fatalf("only %d units", z.n)
	}
	unitDocs(t, ds)
	st := ds.Compressed()
	if st.Starts != 1 {
		t.Errorf("reading %d units in order started %d decoders, want 1", z.n, st.Starts)
	}
	if st.PeakText > block+uint64(longest) {
		t.Errorf("a read held %d bytes of text, want at most a block and a line, %d", st.PeakText, block+longest)
	}
	for k := z.n; k > 0; k-- {
		if err := ds.Docs(k-1, func([]byte) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	// Each start reads unit k and keeps unit k-1 it passed for the next read.
	if got := ds.Compressed().Starts - st.Starts; got != (z.n+1)/2 {
		t.Errorf("reading backwards started %d decoders, want one per two units, %d", got, (z.n+1)/2)
	}

	// Through Tokenized, with two workers tokenizing ahead of the reader.
	for round := range 5 {
		ds, z := openZ(t, path, block, 0)
		pool := NewPool(2)
		src := Tokenized(ds, &byteEncoder{}, Framing{EOS: 0}, NewCache(64<<20), pool)
		for k := range z.n {
			src.Prefetch([]uint64{k, k + 1, k + 2})
			if _, err := src.UnitLen(k); err != nil {
				t.Fatal(err)
			}
		}
		pool.Close()
		if got := ds.Compressed().Starts; got != 1 {
			t.Errorf("round %d: reading in order with prefetch started %d decoders, want 1", round, got)
		}
		src.Close()
	}
}

// TestCompressedDecoderBound: two files read in turn with room for one
// idle decoder start over at every turn, and no more decoders stay open
// than the bound.
func TestCompressedDecoderBound(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a.jsonl.gz", "b.jsonl.gz"} {
		writeFile(t, filepath.Join(dir, name), gzipBytes(t, jsonlLines("text", sampleTexts(500, 7))))
	}
	for _, decoders := range []int{1, 2} {
		ds := mustOpen(t, Spec{Name: "z", Path: dir, Format: files.JSONL, BlockBytes: 2000, Decoders: decoders})
		d := ds.(*concatDocs)
		runs := ds.Groups(0, ds.Units())
		if len(runs) != 2 || runs[0][0] != 0 || runs[1][1] != ds.Units() || runs[0][1] != runs[1][0] {
			t.Fatalf("Groups = %v, want the two files' units", runs)
		}
		if got := ds.Groups(1, runs[0][1]+1); len(got) != 1 || got[0] != [2]uint64{1, runs[0][1]} {
			t.Fatalf("Groups(1, %d) = %v: want the first file's part only (a run of one is no group)", runs[0][1]+1, got)
		}
		n := runs[0][1] - runs[0][0]
		for k := range n - 1 { // both files' units but the last, in turn
			for _, r := range runs {
				if err := ds.Docs(r[0]+k, func([]byte) error { return nil }); err != nil {
					t.Fatal(err)
				}
			}
			d.pool.mu.Lock()
			open := len(d.pool.cursors)
			d.pool.mu.Unlock()
			if open > decoders {
				t.Fatalf("%d decoders open, bound %d", open, decoders)
			}
		}
		want := uint64(2)
		if decoders == 1 {
			want = 2 * (n - 1)
		}
		if got := ds.Compressed().Starts; got != want {
			t.Errorf("decoders %d: %d starts, want %d", decoders, got, want)
		}
	}
}

// TestCompressedMaxWindow: Compressed reports the largest decoder window a
// zstd file's header asks for (what each decoder of it holds); gzip none.
func TestCompressedMaxWindow(t *testing.T) {
	data := jsonlLines("text", sampleTexts(200, 5))
	dir := t.TempDir()
	for _, window := range []int{1 << 20, 8 << 20} {
		var b bytes.Buffer
		w, err := zstd.NewWriter(&b, zstd.WithWindowSize(window))
		if err != nil {
			t.Fatal(err)
		}
		// Flushed before the end, as from a pipe: the header then carries
		// the window (a frame known whole fits in one segment instead).
		w.Write(data[:len(data)/2])
		w.Flush()
		w.Write(data[len(data)/2:])
		w.Close()
		writeFile(t, filepath.Join(dir, fmt.Sprintf("w%d.jsonl.zst", window)), b.Bytes())
	}
	writeFile(t, filepath.Join(dir, "g.jsonl.gz"), gzipBytes(t, data))
	ds := mustOpen(t, Spec{Name: "z", Path: dir, Format: files.JSONL, BlockBytes: 1000})
	if st := ds.Compressed(); st.Files != 3 || st.MaxWindow != 8<<20 {
		t.Fatalf("stats %+v, want 3 files and an 8 MiB window", st)
	}
	gz := mustOpen(t, Spec{Name: "g", Path: filepath.Join(dir, "g.jsonl.gz"), Format: files.JSONL, BlockBytes: 1000})
	if st := gz.Compressed(); st.MaxWindow != 0 {
		t.Fatalf("gzip stats %+v, want no window", st)
	}
}
