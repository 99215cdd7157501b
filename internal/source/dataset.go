package source

import (
	"errors"
	"fmt"
	"sync"

	"github.com/dataloaderd/dataloaderd/internal/files"
)

// fileUnits is the units of one file (or, for Megatron, one .bin/.idx pair),
// numbered from 0. A dataset concatenates them in path order.
type fileUnits interface {
	units() uint64
	tokens() uint64
	// offset is like Source.Offset, clipped to [0, tokens()].
	offset(u uint64) uint64
	unitLen(u uint64) (uint64, error)
	read(u, off uint64, dst []int32) error
	files() []File
	close() error
}

// concatSource is a Source over the fileUnits of one dataset: its files'
// units, concatenated in path order.
type concatSource struct {
	name      string
	parts     []fileUnits
	units     files.Concat // of the parts, sized in tokens
	delimited bool

	closeOnce sync.Once
	closeErr  error
}

// newDataset concatenates parts; it fails, wrapping ErrInvalid, when they hold
// no tokens at all.
func newConcatSource(name string, parts []fileUnits, delimited bool) (*concatSource, error) {
	d := &concatSource{
		name:      name,
		parts:     parts,
		units:     files.NewConcat(len(parts), func(i int) (uint64, uint64) { return parts[i].units(), parts[i].tokens() }),
		delimited: delimited,
	}
	if d.Tokens() == 0 {
		paths := make([]string, 0, len(parts))
		for _, f := range d.Files() {
			paths = append(paths, f.Path)
		}
		return nil, fmt.Errorf("%w: dataset %q: empty dataset: files %q hold 0 tokens", ErrInvalid, name, paths)
	}
	return d, nil
}

// Units is the number of units over all files.
func (d *concatSource) Units() uint64 { return d.units.Units() }

// Tokens is the number of tokens over all files.
func (d *concatSource) Tokens() uint64 { return d.units.Size() }

// Delimited reports whether units carry their own document separators.
func (d *concatSource) Delimited() bool { return d.delimited }

// locate finds the part holding unit u < Units() and u's number in it.
func (d *concatSource) locate(u uint64) (int, uint64) { return d.units.Locate(u) }

// Offset is the position of unit u's first token in the dataset.
func (d *concatSource) Offset(u uint64) uint64 {
	if u >= d.Units() {
		return d.Tokens()
	}
	i, local := d.locate(u)
	return d.units.Base(i) + d.parts[i].offset(local)
}

// UnitLen is the number of tokens of unit u.
func (d *concatSource) UnitLen(u uint64) (uint64, error) {
	if u >= d.Units() {
		return 0, d.unitRangeError(u)
	}
	i, local := d.locate(u)
	return d.parts[i].unitLen(local)
}

// Read copies tokens [off, off+len(dst)) of unit u into dst.
func (d *concatSource) Read(u uint64, off uint64, dst []int32) error {
	if u >= d.Units() {
		return d.unitRangeError(u)
	}
	i, local := d.locate(u)
	return d.parts[i].read(local, off, dst)
}

func (d *concatSource) unitRangeError(u uint64) error {
	return fmt.Errorf("source: dataset %q: unit %d out of range [0, %d)", d.name, u, d.Units())
}

// OffsetError reports a failure Offset could not return: an offset of a
// file in object storage that could not be fetched. Shards cut by Offset
// are only valid while it is nil.
func (d *concatSource) OffsetError() error {
	for _, p := range d.parts {
		if oe, ok := p.(interface{ offsetError() error }); ok {
			if err := oe.offsetError(); err != nil {
				return err
			}
		}
	}
	return nil
}

// Files lists every file of every part, in path order.
func (d *concatSource) Files() []File {
	var files []File
	for _, p := range d.parts {
		files = append(files, p.files()...)
	}
	return files
}

// Close unmaps every file. Reads after Close are not allowed; a second Close
// returns the first one's result.
func (d *concatSource) Close() error {
	d.closeOnce.Do(func() { d.closeErr = closeParts(d.parts) })
	return d.closeErr
}

// closeParts closes every part and joins their errors.
func closeParts(parts []fileUnits) error {
	var errs []error
	for _, p := range parts {
		errs = append(errs, p.close())
	}
	return errors.Join(errs...)
}

// rangeError is the error for a read past the end of a unit: a caller's bug,
// not bad input, so it does not wrap ErrInvalid.
func rangeError(path string, u, off uint64, n int, unitLen uint64) error {
	return fmt.Errorf("source: file %q: unit %d: read of %d tokens at offset %d past its %d tokens", path, u, n, off, unitLen)
}
