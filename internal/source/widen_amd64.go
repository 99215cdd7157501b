package source

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// widenUint16AVX2 zero-extends n uint16 values (n a multiple of 16) at src
// into int32 values at dst. Implemented in widen_amd64.s.
//
//go:noescape
func widenUint16AVX2(dst *int32, src *uint16, n int)

// copyInt32AVX2 copies n int32 values (n a multiple of 16) and reports
// whether any is negative. Implemented in widen_amd64.s.
//
//go:noescape
func copyInt32AVX2(dst, src *int32, n int) bool

var hasAVX2 = cpu.X86.HasAVX2

// copyInt32 copies src into dst (len(dst) >= len(src)) and returns the index
// of the first negative value, or -1: one pass where a copy and a scan of
// the copy took two.
func copyInt32(dst, src []int32) int {
	n := len(src)
	if !hasAVX2 || n < 16 {
		copy(dst, src)
		return firstNegative(dst[:n])
	}
	_ = dst[n-1]
	head := n &^ 15
	neg := copyInt32AVX2(unsafe.SliceData(dst), unsafe.SliceData(src), head)
	copy(dst[head:n], src[head:])
	if neg || firstNegative(dst[head:n]) >= 0 {
		return firstNegative(dst[:n])
	}
	return -1
}

// widenUint16 converts src to int32 tokens in dst (len(dst) >= len(src)). The
// scalar loop runs at about a third of the speed of a memory copy on corpora
// larger than the caches; the vector loop keeps up with the copy.
func widenUint16(dst []int32, src []uint16) {
	n := len(src)
	if hasAVX2 && n >= 16 {
		_ = dst[n-1]
		head := n &^ 15
		widenUint16AVX2(unsafe.SliceData(dst), unsafe.SliceData(src), head)
		dst, src = dst[head:], src[head:]
	}
	for i, v := range src {
		dst[i] = int32(v)
	}
}
