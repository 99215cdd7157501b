package source

import (
	"fmt"
	"math"
	"math/bits"
)

// invalidFile is the error for bad content in one file of a dataset.
func invalidFile(dataset, path, format string, args ...any) error {
	return fmt.Errorf("%w: dataset %q: file %q: %s", ErrInvalid, dataset, path, fmt.Sprintf(format, args...))
}

// mulAdd returns a*b+c, saturated at math.MaxUint64 on overflow, so that size
// checks on untrusted counts cannot wrap around.
func mulAdd(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 {
		return math.MaxUint64
	}
	sum, carry := bits.Add64(lo, c, 0)
	if carry != 0 {
		return math.MaxUint64
	}
	return sum
}
