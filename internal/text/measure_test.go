package text

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// wordEncoder is one token per space-separated word (a hash of it): about
// the bytes per token of a BPE tokenizer, at a fraction of its cost.
type wordEncoder struct{}

func (wordEncoder) Encode(dst []int32, text []byte) []int32 {
	for _, w := range strings.Fields(string(text)) {
		h := fnv.New32a()
		h.Write([]byte(w))
		dst = append(dst, int32(h.Sum32()>>1)|1)
	}
	return dst
}

// TestMeasureCompressedFile measures, on one zstd JSONL file of
// $DATALOADERD_MEASURE_MB MiB of text (skipped when unset), the largest unit
// (tokens a shard holds in the cache for it), the time to the first unit's
// tokens and the decoder starts of an in-order read with prefetch, split by
// the size hint and read whole as before.
func TestMeasureCompressedFile(t *testing.T) {
	mb, _ := strconv.Atoi(os.Getenv("DATALOADERD_MEASURE_MB"))
	if mb <= 0 {
		t.Skip("set DATALOADERD_MEASURE_MB")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	words := make([]string, 5000)
	for i := range words {
		words[i] = fmt.Sprintf("w%x", rng.Uint32()%(1<<(4+rng.IntN(16))))
	}
	var b strings.Builder
	for i := 0; b.Len() < mb<<20; i++ {
		var d strings.Builder
		for range 50 + rng.IntN(400) {
			d.WriteString(words[rng.IntN(len(words))])
			d.WriteByte(' ')
		}
		fmt.Fprintf(&b, "{\"id\": %d, \"text\": %q}\n", i, d.String())
	}
	enc, _ := zstd.NewWriter(nil)
	file := enc.EncodeAll([]byte(b.String()), nil)
	enc.Close()
	path := filepath.Join(t.TempDir(), "big.jsonl.zst")
	writeFile(t, path, file)
	t.Logf("%d MiB of text, %d MiB compressed", b.Len()>>20, len(file)>>20)

	var wholeTotal uint64
	for _, whole := range []bool{true, false} {
		ds, z := openZ(t, path, 256<<10, 0)
		if whole {
			z.hint, z.n = 0, 1
			ds = newConcatDocs(Spec{Name: "z"}, []part{z})
			ds.pool = z.pool
		}
		cache := NewCache(1 << 40)
		pool := NewPool(2)
		src := Tokenized(ds, wordEncoder{}, Framing{EOS: 0}, cache, pool)
		start := time.Now()
		if _, err := src.UnitLen(0); err != nil {
			t.Fatal(err)
		}
		first := time.Since(start)
		var largest, total uint64
		for k := range src.Units() {
			src.Prefetch([]uint64{k + 1, k + 2})
			n, err := src.UnitLen(k)
			if err != nil {
				t.Fatal(err)
			}
			largest, total = max(largest, n), total+n
		}
		all := time.Since(start)
		pool.Close()
		st := ds.Compressed()
		t.Logf("whole=%v: %d units, largest %d tokens (%.1f MiB in the cache) of %d; first unit after %v, all after %v; %d decoder starts, peak text per read %d KiB",
			whole, src.Units(), largest, float64(largest*4)/(1<<20), total, first.Round(time.Millisecond), all.Round(time.Millisecond), st.Starts, st.PeakText>>10)
		src.Close()
		if whole {
			wholeTotal = total
		} else if total != wholeTotal {
			t.Errorf("units hold %d tokens, the whole file %d", total, wholeTotal)
		}
	}
}
