//go:build !amd64

package source

// widenUint16 converts src to int32 tokens in dst (len(dst) >= len(src)).
func widenUint16(dst []int32, src []uint16) {
	for i, v := range src {
		dst[i] = int32(v)
	}
}

// copyInt32 copies src into dst (len(dst) >= len(src)) and returns the index
// of the first negative value, or -1.
func copyInt32(dst, src []int32) int {
	copy(dst, src)
	return firstNegative(dst[:len(src)])
}
