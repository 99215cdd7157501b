package text

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/source"
)

// MaxLineBytes bounds one line of a compressed JSONL file: a longer line is
// an error rather than an unbounded buffer.
const MaxLineBytes = 1 << 30

var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// jsonlFile is a plain JSONL file, memory-mapped. Unit b is nominally bytes
// [b*B, (b+1)*B), with both ends moved forward to the next line start (see
// snap), so units hold whole lines, every line is in exactly one unit, and a
// unit may be empty when a line is longer than B. Finding a unit's ends reads
// only up to the next newline after each nominal end.
type jsonlFile struct {
	dataset, path, field string
	blob                 *files.Blob
	data                 []byte // blob.Data
	blocks               uint64
}

// openJSONLFile opens a JSONL file, compressed or not. A compressed file's
// size hint is read from its header (zstd) or its last 4 bytes (gzip): a
// constant amount of reading per file.
func openJSONLFile(fs files.Dataset, path, field string, blocks uint64, pool *decoderPool) (part, error) {
	dataset := fs.Name
	blob, err := fs.Load(path)
	if err != nil {
		return nil, source.DatasetError(dataset, err)
	}
	keep := false
	defer func() {
		if !keep {
			blob.Close()
		}
	}()
	head := make([]byte, zstd.HeaderMaxSize)
	n, err := blob.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, source.DatasetError(dataset, err)
	}
	head = head[:n]
	z := &zjsonlFile{fs: fs, dataset: dataset, path: path, field: field, size: blob.Size(), block: blocks, pool: pool}
	switch {
	case bytes.HasPrefix(head, gzipMagic):
		var tail [4]byte
		if z.size >= 18 { // a gzip member's header and trailer
			if _, err := blob.ReadAt(tail[:], z.size-4); err != nil {
				return nil, source.DatasetError(dataset, err)
			}
			isize := binary.LittleEndian.Uint32(tail[:])
			z.hint = gzipHint(isize, uint64(z.size))
			z.ambiguous = z.hint > 0 && gzipAmbiguous(isize, uint64(z.size))
		}
		z.setUnits()
		if blob.Remote() {
			z.blob, keep = blob, true
		}
		return z, nil
	case bytes.HasPrefix(head, zstdMagic):
		z.zstd = true
		z.hint = zstdHint(head, uint64(z.size))
		z.window = zstdWindow(head)
		z.setUnits()
		if blob.Remote() {
			z.blob, keep = blob, true
		}
		return z, nil
	}
	keep = true
	return &jsonlFile{dataset: dataset, path: path, field: field, blob: blob, data: blob.Data, blocks: blocks}, nil
}

func (f *jsonlFile) size() uint64 { return uint64(len(f.data)) }

func (f *jsonlFile) units() uint64 {
	return f.size()/f.blocks + min(f.size()%f.blocks, 1)
}

func (f *jsonlFile) bytes() uint64 { return f.size() }

func (f *jsonlFile) offset(b uint64) uint64 { return min(b*f.blocks, f.size()) }

// snapLine moves x forward to the next line start: the smallest p >= x
// with byte p-1 a newline, or the file's end. 0 and the end stay put. An
// object is scanned a cache block at a time.
func (f *jsonlFile) snapLine(x uint64) (uint64, error) {
	size := f.size()
	if x == 0 || x >= size {
		return min(x, size), nil
	}
	if !f.blob.Remote() {
		i := bytes.IndexByte(f.data[x-1:], '\n')
		if i < 0 {
			return size, nil
		}
		return x + uint64(i), nil
	}
	chunk := uint64(f.blob.BlockSize())
	for p := x - 1; p < size; {
		n := min(chunk-p%chunk, size-p)
		if err := f.blob.Hold(p, n); err != nil {
			return 0, source.DatasetError(f.dataset, err)
		}
		i := bytes.IndexByte(f.data[p:p+n], '\n')
		f.blob.Release(p, n)
		if i >= 0 {
			return p + uint64(i) + 1, nil
		}
		p += n
	}
	return size, nil
}

// unitRange is unit b's bytes [start, end).
func (f *jsonlFile) unitRange(b uint64) (uint64, uint64, error) {
	start, err := f.snapLine(b * f.blocks)
	if err != nil {
		return 0, 0, err
	}
	end, err := f.snapLine(min((b+1)*f.blocks, f.size()))
	return start, end, err
}

func (f *jsonlFile) docs(b uint64, visit func([]byte) error, bad func(*BadRecordError) error) error {
	start, end, err := f.unitRange(b)
	if err != nil {
		return err
	}
	if err := f.blob.Hold(start, end-start); err != nil {
		return source.DatasetError(f.dataset, err)
	}
	defer f.blob.Release(start, end-start)
	for pos := start; pos < end; {
		line := f.data[pos:end]
		next := end
		if i := bytes.IndexByte(line, '\n'); i >= 0 {
			line, next = line[:i], pos+uint64(i)+1
		}
		text, reason := parseRecord(line, f.field)
		if reason != "" {
			e := &BadRecordError{Dataset: f.dataset, Path: f.path, Where: fmt.Sprintf("byte %d", pos), Field: f.field, Reason: reason}
			if err := bad(e); err != nil {
				return err
			}
		} else if text != nil {
			if err := visit(text); err != nil {
				return err
			}
		}
		pos = next
	}
	return nil
}

func (f *jsonlFile) file() source.File { return source.File{Path: f.path, Size: int64(len(f.data))} }

func (f *jsonlFile) close() error {
	err := f.blob.Close()
	f.data = nil
	return err
}

// parseRecord returns the text of field in one JSONL line, or why the line is
// not a record. A blank line is no record and no error: (nil, "").
func parseRecord(line []byte, field string) ([]byte, string) {
	if len(bytes.TrimSpace(line)) == 0 {
		return nil, ""
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return nil, fmt.Sprintf("malformed record: a JSON %s, want an object", typeErr.Value)
		}
		return nil, fmt.Sprintf("malformed JSON: %v", err)
	}
	raw, ok := fields[field]
	if !ok {
		return nil, "missing"
	}
	if len(raw) == 0 || raw[0] != '"' {
		return nil, fmt.Sprintf("is %s, want a string", jsonKind(raw))
	}
	text, err := unquote(raw)
	if err != nil {
		return nil, err.Error()
	}
	if text == nil {
		text = []byte{}
	}
	return text, ""
}

// jsonKind names the JSON type of a raw value.
func jsonKind(raw []byte) string {
	switch {
	case len(raw) == 0:
		return "empty"
	case raw[0] == '{':
		return "an object"
	case raw[0] == '[':
		return "an array"
	case raw[0] == 't' || raw[0] == 'f':
		return "a boolean"
	case raw[0] == 'n':
		return "null"
	}
	return "a number"
}
