// An Arrow file's units (its rows): where each lies in the file's record
// batches, its length, and its tokens read into a line.

package source

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
)

func (f *arrowFile) units() uint64 {
	if f.perBatch {
		return uint64(len(f.batches))
	}
	return f.rowStart[len(f.batches)]
}

func (f *arrowFile) tokens() uint64 { return f.tokenBase[len(f.batches)] }

// row finds the batch holding list-layout row u < units() and u's row in it.
func (f *arrowFile) row(u uint64) (int, uint64) {
	b := sort.Search(len(f.batches), func(i int) bool { return f.rowStart[i+1] > u })
	return b, u - f.rowStart[b]
}

// offset is exact for well-formed files; corrupt offsets are clipped to the
// batch and found on reading.
func (f *arrowFile) offset(u uint64) uint64 {
	if u >= f.units() {
		return f.tokens()
	}
	if f.perBatch {
		return f.tokenBase[u]
	}
	b, r := f.row(u)
	o, err := f.listOffset(b, r)
	if err != nil {
		if errors.Is(err, objstore.ErrObject) {
			// Not the file's fault: shards cut from this would differ
			// from run to run. OffsetError makes the open fail.
			f.offsetFailed.CompareAndSwap(nil, err)
		}
		return f.tokenBase[b]
	}
	return f.tokenBase[b] + min(o-min(o, f.batches[b].first), f.tokenBase[b+1]-f.tokenBase[b])
}

// document returns unit u's first value's index in its batch's values, its
// length, and its batch and row for errors.
func (f *arrowFile) document(u uint64) (b int, r, start, n uint64, err error) {
	if f.perBatch {
		return int(u), 0, 0, f.tokenBase[u+1] - f.tokenBase[u], nil
	}
	b, r = f.row(u)
	start, err = f.listOffset(b, r)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	end, err := f.listOffset(b, r+1)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	batch := f.batches[b]
	if start < batch.first || end < start || end > batch.first+(f.tokenBase[b+1]-f.tokenBase[b]) {
		return 0, 0, 0, 0, f.error("column %q, row %d (record batch %d, row %d): offsets [%d, %d) are not within the batch's [%d, %d)",
			f.column, u, b, r, start, end, batch.first, batch.first+f.tokenBase[b+1]-f.tokenBase[b])
	}
	return b, r, start, end - start, nil
}

func (f *arrowFile) unitLen(u uint64) (uint64, error) {
	_, _, _, n, err := f.document(u)
	return n, err
}

func (f *arrowFile) read(u, off uint64, dst []int32) error {
	b, r, start, n, err := f.document(u)
	if err != nil {
		return err
	}
	if off > n || uint64(len(dst)) > n-off {
		return rangeError(f.path, u, off, len(dst), n)
	}
	size := f.dtype.size()
	from, nbytes := f.batches[b].valuesAt+(start+off)*size, uint64(len(dst))*size
	if err := f.blob.Hold(from, nbytes); err != nil {
		return holdError(f.dataset, err)
	}
	defer f.blob.Release(from, nbytes)
	src := f.mapping[from : from+nbytes]
	if bad := decodeTokens(f.dtype, src, dst); bad >= 0 {
		where := fmt.Sprintf("row %d (record batch %d, row %d)", u, b, r)
		if f.perBatch {
			where = fmt.Sprintf("record batch %d (document %d), row %d", b, u, off+uint64(bad))
		}
		return f.error("column %q, %s, token %d: %v value %s is not a token id in [0, 2^31)",
			f.column, where, off+uint64(bad), f.dtype, formatToken(f.dtype, src, bad))
	}
	return nil
}

func (f *arrowFile) files() []File {
	return []File{{Path: f.path, Size: int64(len(f.mapping))}}
}

func (f *arrowFile) close() error {
	err := closeBlob(f.blob)
	f.mapping, f.blob = nil, nil
	return err
}

// arrowColumn is spec's token column.
func arrowColumn(spec Spec) string {
	if c := strings.TrimSpace(spec.Column); c != "" {
		return c
	}
	return DefaultArrowColumn
}
