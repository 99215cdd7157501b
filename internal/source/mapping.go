package source

import (
	"fmt"
	"math"
	"math/bits"
	"os"

	"golang.org/x/sys/unix"
)

// invalidFile is the error for bad content in one file of a dataset.
func invalidFile(dataset, path, format string, args ...any) error {
	return fmt.Errorf("%w: dataset %q: file %q: %s", ErrInvalid, dataset, path, fmt.Sprintf(format, args...))
}

// mapFile memory-maps a whole regular file read-only. An empty file gives a
// nil mapping (mmap refuses zero lengths).
func mapFile(dataset, path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: dataset %q: %w", ErrInvalid, dataset, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: dataset %q: %w", ErrInvalid, dataset, err)
	}
	if !info.Mode().IsRegular() {
		return nil, invalidFile(dataset, path, "not a regular file (mode %v)", info.Mode())
	}
	size := info.Size()
	if size == 0 {
		return nil, nil
	}
	if size > math.MaxInt {
		return nil, invalidFile(dataset, path, "size %d bytes is too large to map", size)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, invalidFile(dataset, path, "mmap: %v", err)
	}
	return data, nil
}

// MapFile memory-maps a whole regular file of a dataset read-only, for the
// readers of other packages (text corpora); an empty file gives a nil
// mapping. Errors wrap ErrInvalid and name the dataset and the file.
func MapFile(dataset, path string) ([]byte, error) { return mapFile(dataset, path) }

// UnmapFile releases a mapping made by MapFile.
func UnmapFile(data []byte) error { return unmapFile(data) }

// unmapFile releases a mapping made by mapFile.
func unmapFile(data []byte) error {
	if len(data) == 0 {
		return nil
	}
	return unix.Munmap(data)
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
