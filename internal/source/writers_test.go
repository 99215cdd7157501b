package source

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// megatronIndex is the content of a .idx file; every field can be set on its
// own so that tests can corrupt exactly one.
type megatronIndex struct {
	magic     string
	version   uint64
	code      uint8
	sequences uint64 // header's N; 0 means len(lengths)
	lengths   []int32
	pointers  []int64
	documents []int64
	trailing  []byte // sequence modes, or garbage
}

// newMegatronIndex is the index Megatron writes for contiguous sequences.
func newMegatronIndex(dt dtype, seqs [][]float64) megatronIndex {
	x := megatronIndex{magic: megatronMagic, version: 1, code: uint8(dt), documents: []int64{0}}
	var pointer int64
	for i, s := range seqs {
		x.lengths = append(x.lengths, int32(len(s)))
		x.pointers = append(x.pointers, pointer)
		x.documents = append(x.documents, int64(i+1))
		pointer += int64(len(s)) * int64(dt.size())
	}
	return x
}

func (x megatronIndex) encode() []byte {
	le := binary.LittleEndian
	b := []byte(x.magic)
	b = le.AppendUint64(b, x.version)
	b = append(b, x.code)
	n := x.sequences
	if n == 0 {
		n = uint64(len(x.lengths))
	}
	b = le.AppendUint64(b, n)
	b = le.AppendUint64(b, uint64(len(x.documents)))
	for _, l := range x.lengths {
		b = le.AppendUint32(b, uint32(l))
	}
	for _, p := range x.pointers {
		b = le.AppendUint64(b, uint64(p))
	}
	for _, d := range x.documents {
		b = le.AppendUint64(b, uint64(d))
	}
	return append(b, x.trailing...)
}

// encodeTokens stores values as little-endian tokens of type dt.
func encodeTokens(dt dtype, values []float64) []byte {
	le := binary.LittleEndian
	var b []byte
	for _, v := range values {
		switch dt {
		case dtUint8, dtInt8:
			b = append(b, byte(int64(v)))
		case dtUint16, dtInt16:
			b = le.AppendUint16(b, uint16(int64(v)))
		case dtUint32, dtInt32:
			b = le.AppendUint32(b, uint32(int64(v)))
		case dtInt64:
			b = le.AppendUint64(b, uint64(int64(v)))
		case dtFloat32:
			b = le.AppendUint32(b, math.Float32bits(float32(v)))
		case dtFloat64:
			b = le.AppendUint64(b, math.Float64bits(v))
		}
	}
	return b
}

// writeMegatron writes prefix.idx and prefix.bin holding seqs.
func writeMegatron(t testing.TB, prefix string, dt dtype, seqs [][]float64) {
	t.Helper()
	writeFile(t, prefix+".idx", newMegatronIndex(dt, seqs).encode())
	writeFile(t, prefix+".bin", encodeTokens(dt, slices.Concat(seqs...)))
}

// llmcFile is a flat token file with an llm.c header claiming count tokens.
func llmcFile(dt dtype, count int32, tokens []float64) []byte {
	header := make([]byte, llmcHeaderBytes)
	version := uint32(1)
	if dt == dtUint32 {
		version = 2
	}
	binary.LittleEndian.PutUint32(header, llmcMagic)
	binary.LittleEndian.PutUint32(header[4:], version)
	binary.LittleEndian.PutUint32(header[8:], uint32(count))
	return append(header, encodeTokens(dt, tokens)...)
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustOpen(t *testing.T, spec Spec) Source {
	t.Helper()
	src, err := Open(spec)
	if err != nil {
		t.Fatalf("Open(%+v): %v", spec, err)
	}
	t.Cleanup(func() {
		if err := src.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return src
}

// checkInvalid asserts that err wraps ErrInvalid and mentions every fragment.
func checkInvalid(t *testing.T, err error, fragments ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one mentioning %q", fragments)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("error %q does not wrap ErrInvalid", err)
	}
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error %q does not mention %q", err, f)
		}
	}
}

// checkUnits is the suite every Source passes: it reads each unit whole and in
// part, and checks the counts and offsets against want.
func checkUnits(t *testing.T, src Source, want [][]int32) {
	t.Helper()
	if got := src.Units(); got != uint64(len(want)) {
		t.Fatalf("Units() = %d, want %d", got, len(want))
	}
	var total uint64
	for _, w := range want {
		total += uint64(len(w))
	}
	if got := src.Tokens(); got != total {
		t.Errorf("Tokens() = %d, want %d", got, total)
	}
	if got := src.Offset(0); got != 0 {
		t.Errorf("Offset(0) = %d, want 0", got)
	}
	if got := src.Offset(src.Units()); got != total {
		t.Errorf("Offset(Units()) = %d, want Tokens() = %d", got, total)
	}
	for u, w := range want {
		unit := uint64(u)
		if src.Offset(unit) > src.Offset(unit+1) {
			t.Errorf("Offset(%d) = %d > Offset(%d) = %d", u, src.Offset(unit), u+1, src.Offset(unit+1))
		}
		n, err := src.UnitLen(unit)
		if err != nil || n != uint64(len(w)) {
			t.Fatalf("UnitLen(%d) = %d, %v; want %d", u, n, err, len(w))
		}
		got := make([]int32, len(w))
		if err := src.Read(unit, 0, got); err != nil || !slices.Equal(got, w) {
			t.Fatalf("Read(%d) = %v, %v; want %v", u, got, err, w)
		}
		if len(w) >= 2 {
			part := make([]int32, len(w)-2)
			if err := src.Read(unit, 1, part); err != nil || !slices.Equal(part, w[1:len(w)-1]) {
				t.Errorf("Read(%d, 1) = %v, %v; want %v", u, part, err, w[1:len(w)-1])
			}
		}
		if err := src.Read(unit, uint64(len(w)), make([]int32, 1)); err == nil || errors.Is(err, ErrInvalid) {
			t.Errorf("Read(%d) past its end: err = %v, want a range error", u, err)
		}
	}
	if _, err := src.UnitLen(src.Units()); err == nil {
		t.Errorf("UnitLen(Units()) succeeded")
	}
	if err := src.Read(src.Units(), 0, nil); err == nil {
		t.Errorf("Read(Units()) succeeded")
	}
}

// toInt32 converts test token values.
func toInt32(values []float64) []int32 {
	out := make([]int32, len(values))
	for i, v := range values {
		out[i] = int32(v)
	}
	return out
}
