package source

import (
	"math/rand"
	"testing"
)

// TestWidenUint16 checks the vector and scalar paths against a plain loop
// for every length up to 200 and every offset into the source (alignment),
// with values across the whole uint16 range, and that nothing past len(src)
// is written.
func TestWidenUint16(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	src := make([]uint16, 260)
	for i := range src {
		src[i] = uint16(rng.Intn(1 << 16))
	}
	src[3], src[40] = 0xffff, 0x8000
	for _, vector := range []bool{true, false} {
		saved := hasAVX2
		hasAVX2 = hasAVX2 && vector
		for off := 0; off < 8; off++ {
			for n := 0; n <= 200; n++ {
				in := src[off : off+n]
				dst := make([]int32, n+5)
				for i := range dst {
					dst[i] = -7
				}
				widenUint16(dst, in)
				for i, v := range in {
					if dst[i] != int32(v) {
						t.Fatalf("vector=%v off %d n %d: dst[%d] = %d, want %d", vector, off, n, i, dst[i], v)
					}
				}
				for i := n; i < len(dst); i++ {
					if dst[i] != -7 {
						t.Fatalf("vector=%v off %d n %d: wrote dst[%d] past the end", vector, off, n, i)
					}
				}
			}
		}
		hasAVX2 = saved
	}
}

func BenchmarkWidenUint16(b *testing.B) {
	src := make([]uint16, 64<<20)
	for i := range src {
		src[i] = uint16(i)
	}
	dst := make([]int32, 4097)
	b.SetBytes(int64(len(dst) * 4))
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < b.N; i++ {
		off := rng.Intn(len(src) - len(dst))
		widenUint16(dst, src[off:off+len(dst)])
	}
}

// TestCopyInt32: the one-pass copy and sign check agrees with a plain copy
// and scan for every length to 100, every alignment, with and without
// AVX2, a negative value at every position or none.
func TestCopyInt32(t *testing.T) {
	src := make([]int32, 120)
	for i := range src {
		src[i] = int32(i*7919 + 1)
	}
	for _, vector := range []bool{true, false} {
		saved := hasAVX2
		hasAVX2 = hasAVX2 && vector
		for off := 0; off < 4; off++ {
			for n := 0; n <= 100; n++ {
				for neg := -1; neg < n; neg++ {
					in := append([]int32(nil), src[off:off+n]...)
					if neg >= 0 {
						in[neg] = -5
					}
					dst := make([]int32, n+3)
					dst[n], dst[n+1], dst[n+2] = 42, 42, 42
					if got := copyInt32(dst, in); got != neg {
						t.Fatalf("vector=%v off %d n %d negative at %d: got %d", vector, off, n, neg, got)
					}
					for i, v := range in {
						if dst[i] != v {
							t.Fatalf("vector=%v n %d: dst[%d] = %d, want %d", vector, n, i, dst[i], v)
						}
					}
					if dst[n] != 42 || dst[n+2] != 42 {
						t.Fatalf("vector=%v n %d: wrote past the end", vector, n)
					}
				}
			}
		}
		hasAVX2 = saved
	}
}
