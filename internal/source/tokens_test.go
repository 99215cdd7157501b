package source

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/files"
)

// referenceBlocks cuts tokens into units by the documented rule, naively.
func referenceBlocks(tokens []int32, eos int32, block int) [][]int32 {
	snap := func(x int) int {
		if x == 0 || x >= len(tokens) {
			return min(x, len(tokens))
		}
		for p := x; p < len(tokens); p++ {
			if tokens[p-1] == eos {
				return p
			}
		}
		return len(tokens)
	}
	var units [][]int32
	for start := 0; start < len(tokens); start += block {
		units = append(units, tokens[snap(start):snap(start+block)])
	}
	return units
}

func TestTokensSnapping(t *testing.T) {
	// Documents [5 6 0] [7 8 9 10 11 12 0] [1 0] [3], blocks of 4 tokens: the
	// long document fills unit 0 past its nominal end and leaves unit 1 empty.
	tokens := []float64{5, 6, 0, 7, 8, 9, 10, 11, 12, 0, 1, 0, 3}
	path := filepath.Join(t.TempDir(), "docs.bin")
	writeFile(t, path, encodeTokens(dtUint16, tokens))
	src := mustOpen(t, Spec{Name: "flat", Path: path, Format: files.Tokens, EOS: 0, BlockTokens: 4})
	checkUnits(t, src, [][]int32{{5, 6, 0, 7, 8, 9, 10, 11, 12, 0}, {}, {1, 0}, {3}})
	for u, want := range []uint64{0, 4, 8, 12, 13} {
		if got := src.Offset(uint64(u)); got != want {
			t.Errorf("Offset(%d) = %d, want the nominal %d", u, got, want)
		}
	}
	if !src.Delimited() {
		t.Errorf("Delimited() = false for flat token files")
	}
}

func TestTokensFileKinds(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name   string
		dtype  string
		stored dtype
		llmc   bool
		eos    int64
	}{
		{"uint16 raw", "", dtUint16, false, 50256},
		{"uint32 raw", "uint32", dtUint32, false, 128001},
		{"uint16 llm.c", "", dtUint16, true, 50256},
		{"uint32 llm.c ignores dtype", "uint16", dtUint32, true, 70000},
	} {
		for _, block := range []uint64{1, 3, 16, 1000} {
			t.Run(fmt.Sprintf("%s/block%d", tc.name, block), func(t *testing.T) {
				values := make([]float64, 200)
				for i := range values {
					values[i] = float64(rng.IntN(1 << (8*tc.stored.size() - 1)))
					if rng.IntN(12) == 0 {
						values[i] = float64(tc.eos)
					}
				}
				data := encodeTokens(tc.stored, values)
				if tc.llmc {
					data = llmcFile(tc.stored, int32(len(values)), values)
				}
				path := filepath.Join(t.TempDir(), "shard.bin")
				writeFile(t, path, data)
				src := mustOpen(t, Spec{Name: "flat", Path: path, Format: files.Tokens,
					Dtype: tc.dtype, EOS: tc.eos, BlockTokens: block})
				want := referenceBlocks(toInt32(values), int32(tc.eos), int(block))
				checkUnits(t, src, want)
				var all []int32
				for u := range src.Units() {
					n, _ := src.UnitLen(u)
					unit := make([]int32, n)
					if err := src.Read(u, 0, unit); err != nil {
						t.Fatal(err)
					}
					if n > 0 && len(all)+int(n) < len(values) && unit[n-1] != int32(tc.eos) {
						t.Errorf("unit %d ends in %d, not EOS", u, unit[n-1])
					}
					all = append(all, unit...)
				}
				if !slices.Equal(all, toInt32(values)) {
					t.Errorf("units joined differ from the file's tokens")
				}
			})
		}
	}
}

func TestTokensDefaultBlock(t *testing.T) {
	values := make([]float64, 3*DefaultBlockTokens+5)
	for i := range values {
		values[i] = float64(i % 7)
	}
	path := filepath.Join(t.TempDir(), "big.bin")
	writeFile(t, path, encodeTokens(dtUint16, values))
	src := mustOpen(t, Spec{Name: "flat", Path: path, Format: files.Tokens, EOS: 6})
	checkUnits(t, src, referenceBlocks(toInt32(values), 6, DefaultBlockTokens))
}

func TestTokensBadInputs(t *testing.T) {
	u16 := encodeTokens(dtUint16, []float64{1, 2, 3})
	for _, tc := range []struct {
		name      string
		data      []byte
		spec      Spec
		fragments []string
	}{
		{"llm.c count above the file", llmcFile(dtUint16, 5, []float64{1, 2, 3}), Spec{},
			[]string{"llm.c header says 5 uint16 tokens: expected 1034 bytes, file has 1030"}},
		{"llm.c count below the file", llmcFile(dtUint32, 2, []float64{1, 2, 3}), Spec{},
			[]string{"llm.c header says 2 uint32 tokens: expected 1032 bytes, file has 1036"}},
		{"llm.c negative count", llmcFile(dtUint16, -1, nil), Spec{}, []string{"token count -1 is negative"}},
		{"llm.c bad version", append(llmcFile(dtUint16, 0, nil)[:4], make([]byte, 1020)...), Spec{},
			[]string{"llm.c header version 0, want 1 (uint16 tokens) or 2 (uint32 tokens)"}},
		{"llm.c truncated header", llmcFile(dtUint16, 0, nil)[:100], Spec{},
			[]string{"file has 100 bytes, the header alone needs 1024"}},
		{"odd size", u16[:5], Spec{}, []string{"size 5 bytes is not a multiple of the 2-byte uint16 token"}},
		{"uint32 odd size", u16, Spec{Dtype: "uint32"}, []string{"size 6 bytes is not a multiple of the 4-byte uint32"}},
		{"bad dtype", u16, Spec{Dtype: "int8"}, []string{`dtype "int8"`, `want "uint16" or "uint32"`}},
		{"eos too large", u16, Spec{EOS: 65536}, []string{"eos_id 65536 does not fit uint16 tokens"}},
		{"eos negative", u16, Spec{EOS: -1}, []string{"eos_id -1 does not fit uint16 tokens"}},
		{"empty file", nil, Spec{}, []string{"empty dataset"}},
		{"llm.c empty", llmcFile(dtUint16, 0, nil), Spec{}, []string{"empty dataset"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "t.bin")
			writeFile(t, path, tc.data)
			spec := tc.spec
			spec.Name, spec.Path, spec.Format = "toks", path, files.Tokens
			_, err := Open(spec)
			fragments := append(tc.fragments, `"toks"`)
			if tc.name != "bad dtype" {
				fragments = append(fragments, path)
			}
			checkInvalid(t, err, fragments...)
		})
	}
}

func TestTokensRejectsValuesAboveInt32(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wide.bin")
	writeFile(t, path, encodeTokens(dtUint32, []float64{1, 0, 2, 1 << 31, 0}))
	src := mustOpen(t, Spec{Name: "wide", Path: path, Format: files.Tokens, Dtype: "uint32", BlockTokens: 2})
	if err := src.Read(0, 0, make([]int32, 2)); err != nil {
		t.Fatal(err)
	}
	err := src.Read(1, 0, make([]int32, 3))
	checkInvalid(t, err, path, "unit 1, token 1 (file token 3)", "2147483648")
}

// TestTokensEOSBytesStraddlingTokens places the EOS byte pattern across every
// pair of neighbouring tokens, so that only the token-aligned match counts.
func TestTokensEOSBytesStraddlingTokens(t *testing.T) {
	for _, tc := range []struct {
		dt         dtype
		fill, eos  float64
		dtypeField string
	}{
		{dtUint16, 0x0001, 0x0100, "uint16"},
		{dtUint32, 0x00000001, 0x00000100, "uint32"},
	} {
		t.Run(tc.dt.String(), func(t *testing.T) {
			values := make([]float64, 300)
			for i := range values {
				values[i] = tc.fill
			}
			values[99], values[250] = tc.eos, tc.eos
			path := filepath.Join(t.TempDir(), "s.bin")
			writeFile(t, path, encodeTokens(tc.dt, values))
			src := mustOpen(t, Spec{Name: "s", Path: path, Format: files.Tokens,
				Dtype: tc.dtypeField, EOS: int64(tc.eos), BlockTokens: 7})
			checkUnits(t, src, referenceBlocks(toInt32(values), int32(tc.eos), 7))
		})
	}
}
