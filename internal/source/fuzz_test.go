package source

import (
	"path/filepath"
	"testing"
)

// readEverything reads every unit of src whole; it fails the test only on a
// unit longer than the dataset, since errors from bad data are expected.
func readEverything(t *testing.T, src Source) {
	for u := range min(src.Units(), 1<<16) {
		n, err := src.UnitLen(u)
		if err != nil {
			continue
		}
		if n > src.Tokens() {
			t.Fatalf("unit %d has %d tokens, more than the dataset's %d", u, n, src.Tokens())
		}
		_ = src.Read(u, 0, make([]int32, n))
		_ = src.Offset(u)
	}
}

func FuzzOpenMegatron(f *testing.F) {
	for dt := dtUint8; dt <= dtUint16; dt++ {
		seqs := [][]float64{{1, 2, 3}, {}, {4, 5}}
		f.Add(newMegatronIndex(dt, seqs).encode(), encodeTokens(dt, []float64{1, 2, 3, 4, 5}))
	}
	x := newMegatronIndex(dtInt16, [][]float64{{1}, {2}})
	x.trailing = []byte{0, 1}
	f.Add(x.encode(), encodeTokens(dtInt16, []float64{1, 2}))
	f.Fuzz(func(t *testing.T, idx, bin []byte) {
		prefix := filepath.Join(t.TempDir(), "f")
		writeFile(t, prefix+".idx", idx)
		writeFile(t, prefix+".bin", bin)
		src, err := Open(Spec{Name: "fuzz", Path: prefix, Format: FormatMegatron})
		if err != nil {
			return
		}
		defer src.Close()
		readEverything(t, src)
	})
}

func FuzzOpenTokens(f *testing.F) {
	f.Add(encodeTokens(dtUint16, []float64{1, 0, 2, 3, 0, 4}), false, uint16(0), uint8(2))
	f.Add(encodeTokens(dtUint32, []float64{1, 9, 2, 3, 9, 4}), true, uint16(9), uint8(1))
	f.Add(llmcFile(dtUint16, 3, []float64{5, 0, 5}), false, uint16(0), uint8(0))
	f.Add(llmcFile(dtUint32, 3, []float64{5, 1 << 31, 5}), false, uint16(5), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, wide bool, eos uint16, block uint8) {
		path := filepath.Join(t.TempDir(), "f.bin")
		writeFile(t, path, data)
		spec := Spec{Name: "fuzz", Path: path, Format: FormatTokens, EOS: int64(eos), BlockTokens: uint64(block)}
		if wide {
			spec.Dtype = "uint32"
		}
		src, err := Open(spec)
		if err != nil {
			return
		}
		defer src.Close()
		readEverything(t, src)
		var sum uint64
		for u := range src.Units() {
			n, err := src.UnitLen(u)
			if err != nil {
				t.Fatalf("UnitLen(%d): %v", u, err)
			}
			sum += n
		}
		if sum != src.Tokens() {
			t.Fatalf("units hold %d tokens, Tokens() = %d", sum, src.Tokens())
		}
	})
}
