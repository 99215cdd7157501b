package stream

import (
	"math/rand"
	"testing"
)

// offsets is a Source stand-in with given unit offsets, for searchOffset.
type offsets []uint64

func (o offsets) Offset(u uint64) uint64 { return o[u] }

// TestSearchOffset checks the interpolating search against a linear scan on
// uniform, skewed and flat offset sequences, for every target.
func TestSearchOffset(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for _, kind := range []string{"uniform", "skewed", "flat runs"} {
		o := offsets{0}
		for len(o) < 400 {
			step := uint64(1 + rng.Intn(10))
			switch kind {
			case "skewed":
				step = uint64(rng.ExpFloat64()*50) * uint64(len(o)%7+1)
			case "flat runs":
				if rng.Intn(3) > 0 {
					step = 0
				}
			}
			o = append(o, o[len(o)-1]+step)
		}
		n := uint64(len(o) - 1)
		for target := uint64(0); target <= o[n]; target++ {
			for _, lo := range []uint64{0, n / 3} {
				want := lo
				for want < n && o[want] < target {
					want++
				}
				if got := searchOffset(o, lo, n, target); got != want {
					t.Fatalf("%s: search from %d for %d: got %d, want %d", kind, lo, target, got, want)
				}
			}
		}
	}
}
