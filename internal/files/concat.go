package files

// Concat numbers the units of a dataset's files one after the other, in file
// order: file i's unit k is the dataset's unit Start(i)+k. It also sums the
// files' sizes in whatever a reader measures them by (tokens, bytes of text),
// so that a unit's offset in the dataset is its file's Base plus its offset
// in the file. A Concat is immutable and safe for concurrent use. Its
// methods are on the hot path of every read (a unit is located per read and
// per prefetch): they take a pointer and search without a closure.
type Concat struct {
	start []uint64 // start[i] is file i's first unit; one more entry than files
	base  []uint64 // base[i] is the size of the files before i; one more entry than files
}

// NewConcat concatenates n files; counts(i) returns file i's units and size.
func NewConcat(n int, counts func(i int) (units, size uint64)) Concat {
	c := Concat{start: make([]uint64, n+1), base: make([]uint64, n+1)}
	for i := range n {
		units, size := counts(i)
		c.start[i+1] = c.start[i] + units
		c.base[i+1] = c.base[i] + size
	}
	return c
}

// Files is the number of files.
func (c *Concat) Files() int { return len(c.start) - 1 }

// Units is the number of units over all files.
func (c *Concat) Units() uint64 { return c.start[c.Files()] }

// Size is the size of all files.
func (c *Concat) Size() uint64 { return c.base[c.Files()] }

// Start is file i's first unit, for i in [0, Files()]; Start(Files()) is
// Units().
func (c *Concat) Start(i int) uint64 { return c.start[i] }

// Base is the size of the files before file i, for i in [0, Files()].
func (c *Concat) Base(i int) uint64 { return c.base[i] }

// Locate returns the file holding unit u < Units() and u's number in it.
// Files with no units are passed over, since their range is empty.
func (c *Concat) Locate(u uint64) (file int, local uint64) {
	// The first file i whose units end after u: start[i+1] > u.
	lo, hi := 0, len(c.start)-1
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if c.start[mid+1] > u {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, u - c.start[lo]
}
