package source

import (
	"encoding/binary"
	"math"
	"strconv"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// dtype is the on-disk type of one token. The values 1..8 are Megatron's
// MMIDIDX dtype codes; dtUint32 exists only in flat token files and Arrow
// columns, dtUint64 only in Arrow columns.
type dtype uint8

const (
	dtUint8   dtype = 1
	dtInt8    dtype = 2
	dtInt16   dtype = 3
	dtInt32   dtype = 4
	dtInt64   dtype = 5
	dtFloat64 dtype = 6
	dtFloat32 dtype = 7
	dtUint16  dtype = 8
	dtUint32  dtype = 9
	dtUint64  dtype = 10
)

// megatronDtypeCodes lists the dtype codes an MMIDIDX version 1 index may hold,
// for error messages.
const megatronDtypeCodes = "1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16"

// dtypeFromMegatron maps an MMIDIDX dtype code to a dtype.
func dtypeFromMegatron(code uint8) (dtype, bool) {
	if code < uint8(dtUint8) || code > uint8(dtUint16) {
		return 0, false
	}
	return dtype(code), true
}

// size is the number of bytes of one token.
func (d dtype) size() uint64 {
	switch d {
	case dtUint8, dtInt8:
		return 1
	case dtInt16, dtUint16:
		return 2
	case dtInt32, dtUint32, dtFloat32:
		return 4
	default:
		return 8
	}
}

// String is the dtype's numpy name.
func (d dtype) String() string {
	names := [...]string{"", "uint8", "int8", "int16", "int32", "int64", "float64", "float32", "uint16", "uint32", "uint64"}
	if int(d) < len(names) {
		return names[d]
	}
	return "dtype(" + strconv.Itoa(int(d)) + ")"
}

// nativeLittleEndian says whether mapped little-endian tokens can be viewed
// in place as Go integers.
const nativeLittleEndian = !cpu.IsBigEndian

// viewAs returns src as a []T without copying when the machine is
// little-endian and src is aligned for T, and nil otherwise.
func viewAs[T uint16 | uint32 | int32](src []byte) []T {
	var zero T
	size := int(unsafe.Sizeof(zero))
	if !nativeLittleEndian || len(src) < size || uintptr(unsafe.Pointer(unsafe.SliceData(src)))%uintptr(size) != 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(src))), len(src)/size)
}

// decodeTokens converts len(dst) tokens of type d from src into dst. It
// returns the index of the first token that is not a valid token id (negative,
// above math.MaxInt32, or not an integer), or -1 when all are valid; dst is
// unspecified from that index on.
func decodeTokens(d dtype, src []byte, dst []int32) int {
	src = src[:uint64(len(dst))*d.size()]
	switch d {
	case dtUint8:
		for i, v := range src {
			dst[i] = int32(v)
		}
	case dtInt8:
		for i, v := range src {
			if v > math.MaxInt8 {
				return i
			}
			dst[i] = int32(v)
		}
	case dtUint16:
		if view := viewAs[uint16](src); view != nil {
			widenUint16(dst, view)
			return -1
		}
		for i := range dst {
			dst[i] = int32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case dtInt16:
		for i := range dst {
			v := int16(binary.LittleEndian.Uint16(src[2*i:]))
			if v < 0 {
				return i
			}
			dst[i] = int32(v)
		}
	case dtInt32:
		return decodeInt32(src, dst)
	case dtUint32:
		return decodeUint32(src, dst)
	case dtInt64:
		for i := range dst {
			v := int64(binary.LittleEndian.Uint64(src[8*i:]))
			if v < 0 || v > math.MaxInt32 {
				return i
			}
			dst[i] = int32(v)
		}
	case dtUint64:
		for i := range dst {
			v := binary.LittleEndian.Uint64(src[8*i:])
			if v > math.MaxInt32 {
				return i
			}
			dst[i] = int32(v)
		}
	case dtFloat32:
		for i := range dst {
			v := float64(math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:])))
			if !isTokenFloat(v) {
				return i
			}
			dst[i] = int32(v)
		}
	case dtFloat64:
		for i := range dst {
			v := math.Float64frombits(binary.LittleEndian.Uint64(src[8*i:]))
			if !isTokenFloat(v) {
				return i
			}
			dst[i] = int32(v)
		}
	}
	return -1
}

// decodeInt32 copies int32 tokens and rejects negative ones. The sign bits are
// OR-ed in the copy loop and looked at once, keeping the loop branch-free.
func decodeInt32(src []byte, dst []int32) int {
	if view := viewAs[int32](src); view != nil {
		return copyInt32(dst, view)
	}
	for i := range dst {
		dst[i] = int32(binary.LittleEndian.Uint32(src[4*i:]))
	}
	return firstNegative(dst)
}

// firstNegative returns the index of dst's first negative value, or -1. It
// tests the sign bits two tokens at a time; only a hit is looked at closely.
func firstNegative(dst []int32) int {
	var signs uint64
	pairs := len(dst) / 2
	if pairs > 0 {
		wide := unsafe.Slice((*uint64)(unsafe.Pointer(&dst[0])), pairs)
		for _, v := range wide {
			signs |= v
		}
	}
	if len(dst)%2 == 1 {
		signs |= uint64(uint32(dst[len(dst)-1]))
	}
	if signs&0x8000000080000000 == 0 {
		return -1
	}
	for i, v := range dst {
		if v < 0 {
			return i
		}
	}
	return -1
}

// decodeUint32 copies uint32 tokens and rejects those above math.MaxInt32,
// which after conversion are exactly the negative int32 values.
func decodeUint32(src []byte, dst []int32) int {
	// A uint32 above math.MaxInt32 reads as a negative int32.
	return decodeInt32(src, dst)
}

// isTokenFloat reports whether a float token holds a valid int32 token id.
func isTokenFloat(v float64) bool {
	return v >= 0 && v <= math.MaxInt32 && v == math.Trunc(v)
}

// formatToken renders token i of src, of type d, for an error message.
func formatToken(d dtype, src []byte, i int) string {
	switch d {
	case dtUint8:
		return strconv.FormatUint(uint64(src[i]), 10)
	case dtInt8:
		return strconv.FormatInt(int64(int8(src[i])), 10)
	case dtUint16:
		return strconv.FormatUint(uint64(binary.LittleEndian.Uint16(src[2*i:])), 10)
	case dtInt16:
		return strconv.FormatInt(int64(int16(binary.LittleEndian.Uint16(src[2*i:]))), 10)
	case dtUint32:
		return strconv.FormatUint(uint64(binary.LittleEndian.Uint32(src[4*i:])), 10)
	case dtInt32:
		return strconv.FormatInt(int64(int32(binary.LittleEndian.Uint32(src[4*i:]))), 10)
	case dtInt64:
		return strconv.FormatInt(int64(binary.LittleEndian.Uint64(src[8*i:])), 10)
	case dtUint64:
		return strconv.FormatUint(binary.LittleEndian.Uint64(src[8*i:]), 10)
	case dtFloat32:
		return strconv.FormatFloat(float64(math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))), 'g', -1, 32)
	case dtFloat64:
		return strconv.FormatFloat(math.Float64frombits(binary.LittleEndian.Uint64(src[8*i:])), 'g', -1, 64)
	}
	return "?"
}
