package text

import (
	"bytes"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/schema"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/source"
)

// newReaderAt wraps a file's mapping for the Parquet reader; tests replace it
// to count the bytes opening reads.
var newReaderAt = func(data []byte) parquet.ReaderAtSeeker { return bytes.NewReader(data) }

// parquetBatch is how many values one column read decodes at a time.
const parquetBatch = 256

// parquetFile is one Parquet file, memory-mapped; each row group is a unit,
// its bytes the text column chunk's uncompressed size from the footer.
// Opening reads the footer only.
type parquetFile struct {
	dataset, path, field string
	blob                 *files.Blob
	reader               *file.Reader
	column               int
	maxDef               int16
	groupBase            []uint64 // byte offset of row group i; one more entry than groups
}

// openParquetFile maps a Parquet file, reads its footer and finds the text
// column.
func openParquetFile(fs files.Dataset, path, field string) (_ part, err error) {
	p := &parquetFile{dataset: fs.Name, path: path, field: field}
	if p.blob, err = fs.Load(path); err != nil {
		return nil, source.DatasetError(fs.Name, err)
	}
	defer func() {
		if r := recover(); r != nil {
			err = p.error("malformed Parquet footer: %v", r)
		}
		if err != nil {
			p.close()
		}
	}()
	var r parquet.ReaderAtSeeker = io.NewSectionReader(p.blob, 0, p.blob.Size())
	if !p.blob.Remote() {
		r = newReaderAt(p.blob.Data)
	}
	if p.reader, err = file.NewParquetReader(r); err != nil {
		return nil, readFailed(p.dataset, p.path, err, "not a readable Parquet file: %v", err)
	}
	meta := p.reader.MetaData()
	sc := meta.Schema
	p.column = sc.ColumnIndexByName(field)
	if p.column < 0 {
		names := make([]string, 0, sc.NumColumns())
		for _, c := range sc.Columns() {
			names = append(names, c.Path())
		}
		return nil, p.error("no column %q; columns present: %q (set the text field)", field, names)
	}
	col := sc.Column(p.column)
	_, decimal := col.LogicalType().(*schema.DecimalLogicalType)
	if col.PhysicalType() != parquet.Types.ByteArray || col.MaxRepetitionLevel() != 0 || decimal {
		return nil, p.error("column %q is %s (%s); want a string or binary column", field, col.PhysicalType(), col.LogicalType())
	}
	p.maxDef = col.MaxDefinitionLevel()
	p.groupBase = make([]uint64, meta.NumRowGroups()+1)
	for g := range meta.NumRowGroups() {
		chunk, err := meta.RowGroup(g).ColumnChunk(p.column)
		if err != nil {
			return nil, p.error("row group %d: %v", g, err)
		}
		p.groupBase[g+1] = p.groupBase[g] + uint64(max(chunk.TotalUncompressedSize(), 0))
	}
	return p, nil
}

func (p *parquetFile) error(format string, args ...any) error {
	return invalidFile(p.dataset, p.path, format, args...)
}

func (p *parquetFile) units() uint64 { return uint64(len(p.groupBase) - 1) }

func (p *parquetFile) bytes() uint64 { return p.groupBase[len(p.groupBase)-1] }

func (p *parquetFile) offset(g uint64) uint64 { return p.groupBase[min(g, p.units())] }

// docs decodes row group g's text column a batch of values at a time.
func (p *parquetFile) docs(g uint64, visit func([]byte) error, bad func(*BadRecordError) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = p.error("row group %d, column %q: malformed data: %v", g, p.field, r)
		}
	}()
	cr, err := p.reader.RowGroup(int(g)).Column(p.column)
	if err != nil {
		return readFailed(p.dataset, p.path, err, "row group %d, column %q: %v", g, p.field, err)
	}
	reader, ok := cr.(*file.ByteArrayColumnChunkReader)
	if !ok {
		return p.error("row group %d, column %q: not a byte array column", g, p.field)
	}
	values := make([]parquet.ByteArray, parquetBatch)
	var defs []int16
	if p.maxDef > 0 {
		defs = make([]int16, parquetBatch)
	}
	var row uint64
	for reader.HasNext() {
		levels, n, err := reader.ReadBatch(parquetBatch, values, defs, nil)
		if err != nil {
			return readFailed(p.dataset, p.path, err, "row group %d, column %q, row %d: %v", g, p.field, row, err)
		}
		if levels == 0 {
			break
		}
		v := 0
		for i := range int(levels) {
			reason := ""
			var text []byte
			switch {
			case defs != nil && defs[i] < p.maxDef:
				reason = "is null"
			case v >= n:
				return p.error("row group %d, column %q, row %d: fewer values than rows", g, p.field, row)
			default:
				text = values[v]
				v++
				if !utf8.Valid(text) {
					reason = "is not valid UTF-8"
				}
			}
			if reason != "" {
				e := &BadRecordError{Dataset: p.dataset, Path: p.path, Where: fmt.Sprintf("row group %d, row %d", g, row), Field: p.field, Reason: reason}
				if err := bad(e); err != nil {
					return err
				}
			} else if err := visit(text); err != nil {
				return err
			}
			row++
		}
	}
	return nil
}

func (p *parquetFile) file() source.File { return source.File{Path: p.path, Size: p.blob.Size()} }

func (p *parquetFile) close() error {
	if p.blob == nil {
		return nil
	}
	err := p.blob.Close()
	p.blob = nil
	return err
}
