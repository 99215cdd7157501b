package source

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// arrow-go trusts the lengths of flatbuffer vectors in IPC metadata and
// allocates from them, so a corrupt file could ask for terabytes before any
// check fails. checkArrow* walk the few tables whose vectors it allocates
// from (schema fields, their children, custom metadata, union type ids,
// footer blocks, record batch nodes and buffers) and check that every such
// vector fits in its buffer, before arrow-go parses them. They also refuse
// compressed record batches: decompression allocates a size read from the
// body, and decompressed buffers could not be read in place anyway.

// Field numbers of the Arrow IPC flatbuffer tables (Message.fbs, Schema.fbs,
// File.fbs) that the checks visit.
const (
	fbMessageHeaderType = 1
	fbMessageHeader     = 2
	fbMessageMetadata   = 4

	fbSchemaFields   = 1
	fbSchemaMetadata = 2
	fbSchemaFeatures = 3

	fbFieldTypeType = 2
	fbFieldType     = 3
	fbFieldChildren = 5
	fbFieldMetadata = 6

	fbUnionTypeIDs = 1
	fbTypeUnion    = 14

	fbBatchNodes       = 1
	fbBatchBuffers     = 2
	fbBatchCompression = 3
	fbBatchVariadic    = 4

	fbDictionaryData = 1

	fbFooterSchema        = 1
	fbFooterDictionaries  = 2
	fbFooterRecordBatches = 3
	fbFooterMetadata      = 4

	fbHeaderSchema     = 1
	fbHeaderDictionary = 2
	fbHeaderBatch      = 3

	fbMaxDepth = 64 // nesting of field children
)

var errFlatbuffer = errors.New("corrupt flatbuffer metadata")

// flatbuf is one flatbuffer: positions are byte offsets into it.
type flatbuf []byte

func (b flatbuf) u32(p int) (uint32, error) {
	if p < 0 || p+4 > len(b) {
		return 0, errFlatbuffer
	}
	return binary.LittleEndian.Uint32(b[p:]), nil
}

// deref follows the offset stored at p.
func (b flatbuf) deref(p int) (int, error) {
	off, err := b.u32(p)
	if err != nil || uint64(p)+uint64(off) >= uint64(len(b)) {
		return 0, errFlatbuffer
	}
	return p + int(off), nil
}

// field returns the position of field i of the table at t, or -1 when the
// table does not have it.
func (b flatbuf) field(t, i int) (int, error) {
	so, err := b.u32(t)
	if err != nil {
		return 0, err
	}
	vt := int64(t) - int64(int32(so))
	if vt < 0 || vt+4 > int64(len(b)) {
		return 0, errFlatbuffer
	}
	// Present as the flatbuffers runtime decides it: the field's slot starts
	// inside the vtable's stated size.
	size := int64(binary.LittleEndian.Uint16(b[vt:]))
	at := vt + 4 + 2*int64(i)
	if 4+2*int64(i) >= size {
		return -1, nil
	}
	if at+2 > int64(len(b)) {
		return 0, errFlatbuffer
	}
	off := int64(binary.LittleEndian.Uint16(b[at:]))
	if off == 0 {
		return -1, nil
	}
	if int64(t)+off >= int64(len(b)) {
		return 0, errFlatbuffer
	}
	return t + int(off), nil
}

// table returns the table field i of the table at t points to, or -1.
func (b flatbuf) table(t, i int) (int, error) {
	p, err := b.field(t, i)
	if err != nil || p < 0 {
		return p, err
	}
	return b.deref(p)
}

// vector returns the position of the first element and the length of vector
// field i of the table at t, after checking that its elements of elem bytes
// fit; a missing vector is empty.
func (b flatbuf) vector(t, i, elem int) (int, int, error) {
	p, err := b.table(t, i)
	if err != nil || p < 0 {
		return 0, 0, err
	}
	n, err := b.u32(p)
	if err != nil || uint64(p)+4+uint64(n)*uint64(elem) > uint64(len(b)) {
		return 0, 0, errFlatbuffer
	}
	return p + 4, int(n), nil
}

// tables calls fn on each table of vector field i of the table at t.
func (b flatbuf) tables(t, i int, fn func(int) error) error {
	start, n, err := b.vector(t, i, 4)
	if err != nil {
		return err
	}
	for k := range n {
		p, err := b.deref(start + 4*k)
		if err != nil {
			return err
		}
		if err := fn(p); err != nil {
			return err
		}
	}
	return nil
}

// checkArrowMessage checks one IPC message's metadata flatbuffer.
func checkArrowMessage(meta []byte) error {
	b := flatbuf(meta)
	root, err := b.deref(0)
	if err != nil {
		return err
	}
	if _, _, err := b.vector(root, fbMessageMetadata, 4); err != nil {
		return err
	}
	kind := -1
	if p, err := b.field(root, fbMessageHeaderType); err != nil {
		return err
	} else if p >= 0 {
		kind = int(b[p])
	}
	header, err := b.table(root, fbMessageHeader)
	if err != nil || header < 0 {
		return err
	}
	switch kind {
	case fbHeaderSchema:
		return b.checkSchema(header)
	case fbHeaderBatch:
		return b.checkBatch(header)
	case fbHeaderDictionary:
		data, err := b.table(header, fbDictionaryData)
		if err != nil || data < 0 {
			return err
		}
		return b.checkBatch(data)
	}
	return nil
}

func (b flatbuf) checkSchema(t int) error {
	if _, _, err := b.vector(t, fbSchemaMetadata, 4); err != nil {
		return err
	}
	if _, _, err := b.vector(t, fbSchemaFeatures, 8); err != nil {
		return err
	}
	return b.tables(t, fbSchemaFields, func(f int) error { return b.checkField(f, 0) })
}

func (b flatbuf) checkField(t, depth int) error {
	if depth > fbMaxDepth {
		return fmt.Errorf("%w: fields nested deeper than %d", errFlatbuffer, fbMaxDepth)
	}
	if _, _, err := b.vector(t, fbFieldMetadata, 4); err != nil {
		return err
	}
	if p, err := b.field(t, fbFieldTypeType); err != nil {
		return err
	} else if p >= 0 && b[p] == fbTypeUnion {
		typ, err := b.table(t, fbFieldType)
		if err != nil {
			return err
		}
		if typ >= 0 {
			if _, _, err := b.vector(typ, fbUnionTypeIDs, 4); err != nil {
				return err
			}
		}
	}
	return b.tables(t, fbFieldChildren, func(c int) error { return b.checkField(c, depth+1) })
}

func (b flatbuf) checkBatch(t int) error {
	if p, err := b.field(t, fbBatchCompression); err != nil {
		return err
	} else if p >= 0 {
		return errors.New("compressed record batches are not supported; write the file uncompressed, so tokens can be read in place")
	}
	for _, v := range []struct{ field, elem int }{{fbBatchNodes, 16}, {fbBatchBuffers, 16}, {fbBatchVariadic, 8}} {
		if _, _, err := b.vector(t, v.field, v.elem); err != nil {
			return err
		}
	}
	return nil
}

// arrowBlock is a footer's record of one message: where it starts, the
// length of its framed metadata, and the length of its body.
type arrowBlock struct {
	offset, meta, body int64
}

// arrowTail is what ends an IPC file: the footer's length, then the magic.
const arrowTail = 6 + 4

// arrowFooterAt returns where the footer of an IPC file of size bytes
// lies, from its length in the file's last arrowTail bytes (data is the
// whole file; only those bytes are read).
func arrowFooterAt(data []byte) (from, to int64, err error) {
	size := int64(len(data))
	if size < 8+arrowTail {
		return 0, 0, fmt.Errorf("%d bytes, too short for an Arrow IPC file", size)
	}
	n := int64(int32(binary.LittleEndian.Uint32(data[size-arrowTail:])))
	if n <= 0 || n > size-8-arrowTail {
		return 0, 0, fmt.Errorf("footer length %d does not fit the file's %d bytes", n, size)
	}
	return size - arrowTail - n, size - arrowTail, nil
}

// checkArrowFooter checks the footer of an IPC file (data starts with the
// magic), and that the dictionaries and record batches it points to lie in
// the file; it returns those, whose metadata the reader checks
// (checkArrowBlock) as it comes to each. Only the footer is read.
func checkArrowFooter(data []byte) (dicts, batches []arrowBlock, err error) {
	from, to, err := arrowFooterAt(data)
	if err != nil {
		return nil, nil, err
	}
	b := flatbuf(data[from:to])
	root, err := b.deref(0)
	if err != nil {
		return nil, nil, err
	}
	if _, _, err := b.vector(root, fbFooterMetadata, 4); err != nil {
		return nil, nil, err
	}
	if schema, err := b.table(root, fbFooterSchema); err != nil {
		return nil, nil, err
	} else if schema >= 0 {
		if err := b.checkSchema(schema); err != nil {
			return nil, nil, err
		}
	}
	if dicts, err = b.footerBlocks(root, fbFooterDictionaries, int64(len(data))); err != nil {
		return nil, nil, err
	}
	batches, err = b.footerBlocks(root, fbFooterRecordBatches, int64(len(data)))
	return dicts, batches, err
}

// footerBlocks reads the blocks of vector field of the footer at root,
// each checked to lie within a file of size bytes.
func (b flatbuf) footerBlocks(root, field int, size int64) ([]arrowBlock, error) {
	start, count, err := b.vector(root, field, 24)
	if err != nil {
		return nil, err
	}
	blocks := make([]arrowBlock, count)
	for k := range blocks {
		p := start + 24*k
		blk := arrowBlock{
			offset: int64(binary.LittleEndian.Uint64(b[p:])),
			meta:   int64(int32(binary.LittleEndian.Uint32(b[p+8:]))),
			body:   int64(binary.LittleEndian.Uint64(b[p+16:])),
		}
		if blk.offset < 0 || blk.meta < 8 || blk.body < 0 || blk.offset > size ||
			blk.meta > size-blk.offset || blk.body > size-blk.offset-blk.meta {
			return nil, fmt.Errorf("message at byte %d: block (metadata %d bytes, body %d bytes) outside the file's %d bytes",
				blk.offset, blk.meta, blk.body, size)
		}
		blocks[k] = blk
	}
	return blocks, nil
}

// checkArrowBlock checks the framed metadata of the message a footer block
// points to (footerBlocks checked that it lies in data).
func checkArrowBlock(data []byte, blk arrowBlock) error {
	frame := data[blk.offset : blk.offset+blk.meta]
	skip := 4
	if binary.LittleEndian.Uint32(frame) == 0xFFFFFFFF {
		skip = 8
	}
	if err := checkArrowMessage(frame[skip:]); err != nil {
		return fmt.Errorf("message at byte %d: %w", blk.offset, err)
	}
	return nil
}
