package source

import (
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/files"
)

func TestMegatronDtypesRoundTrip(t *testing.T) {
	largest := map[dtype]float64{
		dtUint8: 255, dtInt8: 127, dtInt16: 32767, dtInt32: math.MaxInt32,
		dtInt64: math.MaxInt32, dtFloat64: math.MaxInt32, dtFloat32: 1 << 24, dtUint16: 65535,
	}
	for dt := dtUint8; dt <= dtUint16; dt++ {
		t.Run(dt.String(), func(t *testing.T) {
			seqs := [][]float64{{0, 1, 2, largest[dt]}, {}, {7}, {3, 4, 5, 6, 8, 9}}
			prefix := filepath.Join(t.TempDir(), "corpus")
			writeMegatron(t, prefix, dt, seqs)
			src := mustOpen(t, Spec{Name: "m", Path: prefix, Format: files.Megatron})
			want := make([][]int32, len(seqs))
			for i, s := range seqs {
				want[i] = toInt32(s)
			}
			checkUnits(t, src, want)
			if src.Delimited() {
				t.Errorf("Delimited() = true for megatron")
			}
			var offset uint64
			for u, s := range seqs {
				if got := src.Offset(uint64(u)); got != offset {
					t.Errorf("Offset(%d) = %d, want exactly %d", u, got, offset)
				}
				offset += uint64(len(s))
			}
		})
	}
}

func TestMegatronRejectsValuesThatAreNotTokenIDs(t *testing.T) {
	for _, tc := range []struct {
		dt    dtype
		value float64
		shown string
	}{
		{dtInt8, -1, "-1"},
		{dtInt16, -2, "-2"},
		{dtInt32, -3, "-3"},
		{dtInt64, 1 << 31, "2147483648"},
		{dtInt64, -1, "-1"},
		{dtFloat32, 1.5, "1.5"},
		{dtFloat64, -4, "-4"},
		{dtFloat64, math.NaN(), "NaN"},
		{dtFloat64, 1 << 40, "1.099511627776e+12"},
	} {
		t.Run(fmt.Sprintf("%v/%s", tc.dt, tc.shown), func(t *testing.T) {
			prefix := filepath.Join(t.TempDir(), "bad")
			writeMegatron(t, prefix, tc.dt, [][]float64{{1, 2}, {3, tc.value, 5}})
			src := mustOpen(t, Spec{Name: "vals", Path: prefix, Format: files.Megatron})
			if err := src.Read(0, 0, make([]int32, 2)); err != nil {
				t.Fatalf("Read of the good sequence: %v", err)
			}
			err := src.Read(1, 0, make([]int32, 3))
			checkInvalid(t, err, `"vals"`, prefix+".bin", "sequence 1", "token 1", tc.shown)
		})
	}
}

func TestMegatronSequenceModes(t *testing.T) {
	seqs := [][]float64{{1, 2}, {3}}
	for _, tc := range []struct {
		name     string
		trailing []byte
		fragment string
	}{
		{"one mode per sequence", []byte{0, 0}, ""},
		{"garbage", []byte{0, 0, 0}, "3 bytes after the document index, want 0 or 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := filepath.Join(t.TempDir(), "c")
			writeMegatron(t, prefix, dtUint16, seqs)
			x := newMegatronIndex(dtUint16, seqs)
			x.trailing = tc.trailing
			writeFile(t, prefix+".idx", x.encode())
			src, err := Open(Spec{Name: "modes", Path: prefix, Format: files.Megatron})
			if tc.fragment == "" {
				if err != nil {
					t.Fatal(err)
				}
				src.Close()
				return
			}
			checkInvalid(t, err, tc.fragment, prefix+".idx", `"modes"`)
		})
	}
}

func TestMegatronBadInputs(t *testing.T) {
	seqs := [][]float64{{1, 2, 3}, {4, 5}, {6}}
	for _, tc := range []struct {
		name      string
		corrupt   func(x *megatronIndex, bin *[]byte)
		fragments []string
	}{
		{"bad magic", func(x *megatronIndex, _ *[]byte) { x.magic = "NOTANIDX\x00" },
			[]string{".idx", `magic "NOTANIDX\x00"`}},
		{"bad version", func(x *megatronIndex, _ *[]byte) { x.version = 2 },
			[]string{".idx", "version 2, want 1"}},
		{"bad dtype code", func(x *megatronIndex, _ *[]byte) { x.code = 9 },
			[]string{".idx", "dtype code 9", "8 uint16"}},
		{"index shorter than its counts", func(x *megatronIndex, _ *[]byte) { x.sequences = 1000 },
			[]string{".idx", "1000 sequences and 4 documents need 12066 bytes, file has 102"}},
		{"truncated bin", func(_ *megatronIndex, bin *[]byte) { *bin = (*bin)[:10] },
			[]string{".bin", "truncated", "sequence 2 ends at byte 12, expected at least 12 bytes, file has 10"}},
		{"lengths beyond the bin", func(x *megatronIndex, _ *[]byte) { x.lengths[2] = 50 },
			[]string{".bin", "sequence 2 ends at byte 110, expected at least 110 bytes, file has 12"}},
		{"negative first pointer", func(x *megatronIndex, _ *[]byte) { x.pointers[0] = -8 },
			[]string{".idx", "sequence 0: pointer -8 is negative"}},
		{"negative last length", func(x *megatronIndex, _ *[]byte) { x.lengths[2] = -1 },
			[]string{".idx", "sequence 2: length -1 is negative"}},
		{"misaligned pointer", func(x *megatronIndex, _ *[]byte) { x.pointers[2] = 9 },
			[]string{".idx", "sequence 2: pointer 9 is not a multiple of the 2-byte uint16 token"}},
		{"last before first", func(x *megatronIndex, _ *[]byte) { x.pointers[0], x.lengths[0], x.pointers[2] = 10, 1, 0 },
			[]string{".idx", "last sequence 2 starts at byte 0, before the first sequence's byte 10"}},
		{"short header", nil, []string{".idx", "12 bytes, shorter than the 34-byte MMIDIDX header"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := filepath.Join(t.TempDir(), "c")
			x := newMegatronIndex(dtUint16, seqs)
			bin := encodeTokens(dtUint16, []float64{1, 2, 3, 4, 5, 6})
			idx := []byte(megatronMagic + "\x01\x00\x00")
			if tc.corrupt != nil {
				tc.corrupt(&x, &bin)
				idx = x.encode()
			}
			writeFile(t, prefix+".idx", idx)
			writeFile(t, prefix+".bin", bin)
			_, err := Open(Spec{Name: "corrupt", Path: prefix, Format: files.Megatron})
			checkInvalid(t, err, append(tc.fragments, `"corrupt"`, prefix)...)
		})
	}
}

// TestMegatronOpenReadsOnlyTheEnds checks the zero-build promise: opening reads
// the first and last index entries of a file, never the ones between, which
// are checked when their unit is read.
func TestMegatronOpenReadsOnlyTheEnds(t *testing.T) {
	const n = 1_000_000
	x := megatronIndex{magic: megatronMagic, version: 1, code: uint8(dtUint8)}
	x.lengths = make([]int32, n)
	x.pointers = make([]int64, n)
	for i := range n {
		x.lengths[i], x.pointers[i] = 1, int64(i)
	}
	x.lengths[n/2] = -1 // corrupt, and only found on reading it
	prefix := filepath.Join(t.TempDir(), "big")
	writeFile(t, prefix+".idx", x.encode())
	writeFile(t, prefix+".bin", make([]byte, n))

	var reads []uint64
	sequenceReadHook = func(i uint64) { reads = append(reads, i) }
	defer func() { sequenceReadHook = nil }()
	src := mustOpen(t, Spec{Name: "big", Path: prefix, Format: files.Megatron})
	if len(reads) > 2 {
		t.Errorf("Open read %d index entries (%v...), want at most 2", len(reads), reads[:3])
	}
	if src.Units() != n || src.Tokens() != n {
		t.Errorf("Units, Tokens = %d, %d; want %d, %d", src.Units(), src.Tokens(), n, n)
	}
	_, err := src.UnitLen(n / 2)
	checkInvalid(t, err, prefix+".idx", "sequence 500000: length -1 is negative")
	checkInvalid(t, src.Read(n/2, 0, nil), "sequence 500000")
}

func TestMegatronIndexFieldOffsets(t *testing.T) {
	// The header layout the parser assumes, spelled out.
	b := newMegatronIndex(dtInt32, [][]float64{{1}}).encode()
	if got := binary.LittleEndian.Uint64(b[18:]); got != 1 {
		t.Errorf("sequence count at byte 18 = %d, want 1", got)
	}
	if got := b[17]; got != uint8(dtInt32) {
		t.Errorf("dtype code at byte 17 = %d, want 4", got)
	}
	if megatronHeaderSize != 34 {
		t.Errorf("header size %d, want 34", megatronHeaderSize)
	}
}

func TestMegatronNonContiguousSequences(t *testing.T) {
	seqs := [][]float64{{1, 2}, {3, 4}, {5, 6}}
	x := newMegatronIndex(dtUint16, seqs)
	x.pointers[1] = 2 // overlaps sequence 0, leaving a gap before sequence 2
	prefix := filepath.Join(t.TempDir(), "gap")
	writeFile(t, prefix+".idx", x.encode())
	writeFile(t, prefix+".bin", encodeTokens(dtUint16, slices.Concat(seqs...)))
	src := mustOpen(t, Spec{Name: "gap", Path: prefix, Format: files.Megatron})
	_, err := src.UnitLen(0)
	checkInvalid(t, err, prefix+".idx", "sequence 0 ends at byte 4 but sequence 1 starts at byte 2", "contiguous")
	checkInvalid(t, src.Read(1, 0, make([]int32, 2)), "sequence 1 ends at byte 6 but sequence 2 starts at byte 8")
	if n, err := src.UnitLen(2); err != nil || n != 2 {
		t.Errorf("UnitLen(2) = %d, %v; want 2", n, err)
	}
}
