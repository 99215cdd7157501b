//go:build !amd64

package source

// widenUint16 converts src to int32 tokens in dst (len(dst) >= len(src)).
func widenUint16(dst []int32, src []uint16) {
	for i, v := range src {
		dst[i] = int32(v)
	}
}
