package source

import (
	"path/filepath"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/files"
)

// TestPrefetchHintsAreHarmless: prefetch hints for every unit and offset,
// in range and out of it, change nothing and never fault.
func TestPrefetchHintsAreHarmless(t *testing.T) {
	seqs := [][]float64{{1, 2, 3}, {4}, {5, 6}}
	x := newMegatronIndex(dtUint16, seqs)
	prefix := filepath.Join(t.TempDir(), "p")
	writeFile(t, prefix+".idx", x.encode())
	writeFile(t, prefix+".bin", encodeTokens(dtUint16, []float64{1, 2, 3, 4, 5, 6}))
	src := mustOpen(t, Spec{Name: "p", Path: prefix, Format: files.Megatron})
	pf, ok := src.(Prefetcher)
	if !ok {
		t.Fatal("a Megatron dataset does not offer prefetch hints")
	}
	for u := uint64(0); u < 5; u++ {
		pf.PrefetchIndex(u)
		for off := uint64(0); off < 5; off++ {
			pf.PrefetchToken(u, off)
		}
	}
	dst := make([]int32, 2)
	if err := src.Read(2, 0, dst); err != nil || dst[0] != 5 || dst[1] != 6 {
		t.Fatalf("read after hints: %v %v", dst, err)
	}
}
