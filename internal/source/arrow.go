package source

import (
	"bytes"
	"encoding/binary"
	"sync/atomic"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/dataloaderd/dataloaderd/internal/files"
)

// DefaultArrowColumn is the token column of Arrow IPC files when Spec.Column
// is empty.
const DefaultArrowColumn = files.TokenColumn

// arrowBatchHook, when set, sees every record batch Open describes. Tests use
// it to check that opening touches batch metadata only, once per batch.
var arrowBatchHook func(path string, batch int)

// arrowFile is one Arrow IPC file (file format with its footer, or stream
// format) of pre-tokenized documents, memory-mapped. Two layouts are read:
//
//   - list layout: the column is list or large_list of integers, one row per
//     document; each row is a unit.
//   - batch layout (IBM's fms-fsdp loader): the column is a plain integer
//     column, one token per row and one record batch per document; each
//     record batch is a unit.
//
// Opening decodes each record batch's metadata once (O(batches), never
// O(rows) or O(tokens)) and keeps, per batch, where its offsets and values
// lie in the mapping. For the list layout it reads the first and last offset
// of each batch; every other offset is read when its row is.
type arrowFile struct {
	dataset, path, column string
	blob                  *files.Blob
	mapping               []byte       // blob.Data
	offsetFailed          atomic.Value // error: an offset could not be fetched
	dtype                 dtype
	perBatch              bool   // batch layout
	offsetWidth           uint64 // 4 for list, 8 for large_list
	batches               []arrowBatch
	rowStart              []uint64 // list layout: batch i's first row; one more entry than batches
	tokenBase             []uint64 // batch i's first token in the file; one more entry than batches
}

// arrowBatch is where one record batch's column lies in the mapping.
type arrowBatch struct {
	offsetsAt uint64 // list layout: byte position of the batch's offsets[0]
	valuesAt  uint64 // byte position of the batch's values[0]
	values    uint64 // values available from valuesAt
	first     uint64 // list layout: offsets[0]
	rows      uint64
}

// openArrowFile maps one Arrow IPC file and describes its record batches.
func openArrowFile(fs files.Dataset, path, column string) (_ *arrowFile, err error) {
	f := &arrowFile{dataset: fs.Name, path: path, column: column}
	if f.blob, err = loadFile(fs, path); err != nil {
		return nil, err
	}
	f.mapping = f.blob.Data
	defer func() {
		if err != nil {
			f.close()
		}
	}()
	// arrow-go panics on some malformed metadata; that is bad input here.
	defer func() {
		if r := recover(); r != nil {
			err = f.error("malformed Arrow IPC data: %v", r)
		}
	}()
	f.rowStart = []uint64{0}
	f.tokenBase = []uint64{0}
	head := min(uint64(len(f.mapping)), uint64(len(ipc.Magic)))
	release, err := f.hold(0, head)
	if err != nil {
		return nil, err
	}
	fileFormat := bytes.HasPrefix(f.mapping, ipc.Magic)
	release()
	if fileFormat {
		// An object is read by its footer and its record batches'
		// metadata (arrowfooter.go).
		return f, f.readFileFormat()
	}
	// A stream has no footer: its messages follow one another through the
	// file, so an object is fetched whole while it is described (then its
	// blocks may be evicted, and its reads fetch what they read).
	size := uint64(f.blob.Size())
	if err := f.blob.HoldWhole("an Arrow IPC stream, at open (the IPC file format is read by its footer)"); err != nil {
		return nil, holdError(f.dataset, err)
	}
	defer f.blob.Release(0, size)
	return f, f.readStreamFormat()
}

// useSchema finds the token column and its layout.
// The mapping is read-only and read in place, so only files in the
// machine's byte order are read (arrow-go would swap them in place).
func (f *arrowFile) useSchema(schema *arrow.Schema) error {
	if !schema.IsNativeEndian() {
		return f.error("schema is %v-endian, not this machine's byte order; rewrite the file natively", schema.Endianness())
	}
	idx := schema.FieldIndices(f.column)
	if len(idx) == 0 {
		names := make([]string, 0, schema.NumFields())
		for _, field := range schema.Fields() {
			names = append(names, field.Name)
		}
		return f.error("no column %q; columns present: %q (set column)", f.column, names)
	}
	typ := schema.Field(idx[0]).Type
	if dt, ok := arrowIntDtype(typ); ok {
		f.dtype, f.perBatch = dt, true
		return nil
	}
	var elem arrow.DataType
	switch t := typ.(type) {
	case *arrow.ListType:
		elem, f.offsetWidth = t.Elem(), 4
	case *arrow.LargeListType:
		elem, f.offsetWidth = t.Elem(), 8
	}
	if elem != nil {
		if dt, ok := arrowIntDtype(elem); ok {
			f.dtype = dt
			return nil
		}
	}
	return f.error("column %q has type %s; want list or large_list of int8..int64/uint8..uint64 (one row per document), "+
		"or an integer column (one record batch per document)", f.column, typ)
}

// arrowIntDtype maps an Arrow integer type to a dtype.
func arrowIntDtype(t arrow.DataType) (dtype, bool) {
	switch t.ID() {
	case arrow.INT8:
		return dtInt8, true
	case arrow.UINT8:
		return dtUint8, true
	case arrow.INT16:
		return dtInt16, true
	case arrow.UINT16:
		return dtUint16, true
	case arrow.INT32:
		return dtInt32, true
	case arrow.UINT32:
		return dtUint32, true
	case arrow.INT64:
		return dtInt64, true
	case arrow.UINT64:
		return dtUint64, true
	}
	return 0, false
}

// addBatch records where the batch's column lies in the mapping and counts
// its tokens (describeBatch, then countBatch).
func (f *arrowFile) addBatch(rec arrow.RecordBatch) error {
	if err := f.describeBatch(rec); err != nil {
		return err
	}
	return f.countBatch(len(f.batches) - 1)
}

// describeBatch records where the batch's column lies in the mapping, from
// its metadata alone. Null counts come from the metadata; only a batch that
// has nulls is looked at further.
func (f *arrowFile) describeBatch(rec arrow.RecordBatch) error {
	b := len(f.batches)
	if arrowBatchHook != nil {
		arrowBatchHook(f.path, b)
	}
	col := rec.Column(rec.Schema().FieldIndices(f.column)[0])
	data := col.Data()
	rows := uint64(data.Len())
	if col.NullN() > 0 {
		return f.error("column %q, record batch %d: %d null rows; want none", f.column, b, col.NullN())
	}
	var batch arrowBatch
	if f.perBatch {
		at, n, err := f.locate(data, b)
		if err != nil {
			return err
		}
		if n < rows {
			return f.error("column %q, record batch %d: values buffer holds %d of its %d tokens", f.column, b, n, rows)
		}
		batch.valuesAt, batch.values, batch.rows = at, rows, rows
		f.batches = append(f.batches, batch)
		return nil
	}
	child := data.Children()[0]
	if child.NullN() > 0 {
		return f.error("column %q, record batch %d: %d null tokens; want none", f.column, b, child.NullN())
	}
	var err error
	if batch.valuesAt, batch.values, err = f.locate(child, b); err != nil {
		return err
	}
	offsets := data.Buffers()[1]
	need := (uint64(data.Offset()) + rows + 1) * f.offsetWidth
	if rows > 0 && (offsets == nil || uint64(offsets.Len()) < need) {
		return f.error("column %q, record batch %d: offsets buffer shorter than its %d rows need", f.column, b, rows)
	}
	if rows > 0 {
		at, ok := f.position(offsets.Bytes())
		if !ok {
			return f.error("column %q, record batch %d: offsets are not stored in place (compressed IPC buffers are not supported)", f.column, b)
		}
		batch.offsetsAt = at + uint64(data.Offset())*f.offsetWidth
	}
	batch.rows = rows
	f.batches = append(f.batches, batch)
	return nil
}

// countBatch counts the tokens of batch b, the next one not counted: for
// the list layout from its first and last offsets.
func (f *arrowFile) countBatch(b int) error {
	batch, rows := f.batches[b], f.batches[b].rows
	if f.perBatch {
		f.tokenBase = append(f.tokenBase, f.tokenBase[b]+rows)
		return nil
	}
	tokens := uint64(0)
	if rows > 0 {
		first, err := f.listOffset(b, 0)
		if err != nil {
			return err
		}
		last, err := f.listOffset(b, rows)
		if err != nil {
			return err
		}
		if last < first || last > batch.values {
			return f.error("column %q, record batch %d: offsets run from %d to %d, outside the %d values",
				f.column, b, first, last, batch.values)
		}
		f.batches[b].first, tokens = first, last-first
	}
	f.rowStart = append(f.rowStart, f.rowStart[b]+rows)
	f.tokenBase = append(f.tokenBase, f.tokenBase[b]+tokens)
	return nil
}

// locate finds an integer array's values in the mapping: their byte position
// and how many values the buffer holds from there.
func (f *arrowFile) locate(data arrow.ArrayData, b int) (at, n uint64, err error) {
	values := data.Buffers()[1]
	if values == nil || values.Len() == 0 {
		return 0, 0, nil
	}
	at, ok := f.position(values.Bytes())
	if !ok {
		return 0, 0, f.error("column %q, record batch %d: tokens are not stored in place (compressed IPC buffers are not supported)", f.column, b)
	}
	size := f.dtype.size()
	skip := uint64(data.Offset())
	if have := uint64(values.Len()) / size; skip > have {
		return 0, 0, f.error("column %q, record batch %d: array offset %d past its %d values", f.column, b, skip, have)
	}
	return at + skip*size, uint64(values.Len())/size - skip, nil
}

// position returns where buf starts in the mapping, if it lies inside it.
func (f *arrowFile) position(buf []byte) (uint64, bool) {
	if len(buf) == 0 || len(f.mapping) == 0 {
		return 0, false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(f.mapping)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	if p < base || p-base+uintptr(len(buf)) > uintptr(len(f.mapping)) {
		return 0, false
	}
	return uint64(p - base), true
}

// listOffset reads offsets[i] of list-layout batch b, i <= the batch's rows.
func (f *arrowFile) listOffset(b int, i uint64) (uint64, error) {
	at := f.batches[b].offsetsAt + i*f.offsetWidth
	if err := f.blob.Hold(at, f.offsetWidth); err != nil {
		return 0, holdError(f.dataset, err)
	}
	defer f.blob.Release(at, f.offsetWidth)
	var v int64
	if f.offsetWidth == 4 {
		v = int64(int32(binary.LittleEndian.Uint32(f.mapping[at:])))
	} else {
		v = int64(binary.LittleEndian.Uint64(f.mapping[at:]))
	}
	if v < 0 {
		return 0, f.error("column %q, record batch %d: offset %d is %d, negative", f.column, b, i, v)
	}
	return uint64(v), nil
}

// offsetError is the first failure to fetch an offset for offset().
func (f *arrowFile) offsetError() error {
	err, _ := f.offsetFailed.Load().(error)
	return err
}

func (f *arrowFile) error(format string, args ...any) error {
	return invalidFile(f.dataset, f.path, format, args...)
}
