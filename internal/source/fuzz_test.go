package source

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/dataloaderd/dataloaderd/internal/files"
)

// readEverything reads every unit of src whole. Errors from bad data are
// expected; but when every unit reads, the units must hold Tokens() tokens.
func readEverything(t *testing.T, src Source) {
	if src.Units() > 1<<16 {
		return
	}
	var sum uint64
	readable := true
	for u := range src.Units() {
		_ = src.Offset(u)
		n, err := src.UnitLen(u)
		if err != nil {
			readable = false
			continue
		}
		if n > src.Tokens() {
			t.Fatalf("unit %d has %d tokens, more than the dataset's %d", u, n, src.Tokens())
		}
		sum += n
		if err := src.Read(u, 0, make([]int32, n)); err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("Read(%d) of its UnitLen %d tokens: %v", u, n, err)
		}
	}
	if readable && sum != src.Tokens() {
		t.Fatalf("units hold %d tokens, Tokens() = %d", sum, src.Tokens())
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
		src, err := Open(Spec{Name: "fuzz", Path: prefix, Format: files.Megatron})
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
		spec := Spec{Name: "fuzz", Path: path, Format: files.Tokens, EOS: int64(eos), BlockTokens: uint64(block)}
		if wide {
			spec.Dtype = "uint32"
		}
		src, err := Open(spec)
		if err != nil {
			return
		}
		defer src.Close()
		readEverything(t, src)
	})
}

func FuzzOpenArrow(f *testing.F) {
	list := arrowColumnSpec{"tokens", arrow.ListOf(arrow.PrimitiveTypes.Int32), []string{"[[1, 2], [], [3]]", "[[4]]"}}
	large := arrowColumnSpec{"tokens", arrow.LargeListOf(arrow.PrimitiveTypes.Uint16), []string{"[[1, 2], [3]]"}}
	perBatch := arrowColumnSpec{"tokens", arrow.PrimitiveTypes.Int64, []string{"[1, 2]", "[3]", "[]"}}
	for _, stream := range []bool{false, true} {
		f.Add(encodeArrow(f, stream, list))
		f.Add(encodeArrow(f, stream, large))
		f.Add(encodeArrow(f, stream, perBatch))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "f.arrow")
		writeFile(t, path, data)
		src, err := Open(Spec{Name: "fuzz", Path: path, Format: files.Arrow})
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Open error %v does not wrap ErrInvalid", err)
			}
			return
		}
		defer src.Close()
		readEverything(t, src)
	})
}
