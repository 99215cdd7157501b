package text

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/klauspost/compress/zstd"

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
	data                 []byte
	blocks               uint64
}

// zjsonlFile is a compressed JSONL file (gzip or zstd, by magic number). It
// cannot be entered in the middle, so it is one unit, decompressed as a
// stream when its unit is read: memory for the text is one line (at most
// MaxLineBytes) plus the decompressor's window, whatever the file's size.
// Its byte size for shard cutting is the compressed size.
type zjsonlFile struct {
	dataset, path, field string
	size                 int64
	zstd                 bool
}

// openJSONLFile opens a JSONL file, compressed or not.
func openJSONLFile(dataset, path, field string, blocks uint64) (part, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: dataset %q: %w", source.ErrInvalid, dataset, err)
	}
	var head [4]byte
	n, _ := io.ReadFull(f, head[:])
	info, err := f.Stat()
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("%w: dataset %q: %w", source.ErrInvalid, dataset, err)
	}
	switch {
	case bytes.HasPrefix(head[:n], gzipMagic):
		return &zjsonlFile{dataset: dataset, path: path, field: field, size: info.Size()}, nil
	case bytes.HasPrefix(head[:n], zstdMagic):
		return &zjsonlFile{dataset: dataset, path: path, field: field, size: info.Size(), zstd: true}, nil
	}
	data, err := source.MapFile(dataset, path)
	if err != nil {
		return nil, err
	}
	return &jsonlFile{dataset: dataset, path: path, field: field, data: data, blocks: blocks}, nil
}

func (f *jsonlFile) size() uint64 { return uint64(len(f.data)) }

func (f *jsonlFile) units() uint64 {
	return f.size()/f.blocks + min(f.size()%f.blocks, 1)
}

func (f *jsonlFile) bytes() uint64 { return f.size() }

func (f *jsonlFile) offset(b uint64) uint64 { return min(b*f.blocks, f.size()) }

// snap moves x forward to the next line start: the smallest p >= x with
// byte p-1 a newline, or the file's end. 0 and the end stay put.
func snapLine(data []byte, x uint64) uint64 {
	size := uint64(len(data))
	if x == 0 || x >= size {
		return min(x, size)
	}
	i := bytes.IndexByte(data[x-1:], '\n')
	if i < 0 {
		return size
	}
	return x + uint64(i)
}

// unitRange is unit b's bytes [start, end).
func (f *jsonlFile) unitRange(b uint64) (uint64, uint64) {
	return snapLine(f.data, b*f.blocks), snapLine(f.data, min((b+1)*f.blocks, f.size()))
}

func (f *jsonlFile) docs(b uint64, visit func([]byte) error, bad func(*BadRecordError) error) error {
	start, end := f.unitRange(b)
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
	err := source.UnmapFile(f.data)
	f.data = nil
	return err
}

func (f *zjsonlFile) units() uint64 { return 1 }

func (f *zjsonlFile) bytes() uint64 { return uint64(f.size) }

func (f *zjsonlFile) offset(uint64) uint64 { return 0 }

func (f *zjsonlFile) docs(_ uint64, visit func([]byte) error, bad func(*BadRecordError) error) error {
	file, err := os.Open(f.path)
	if err != nil {
		return fmt.Errorf("%w: dataset %q: %w", source.ErrInvalid, f.dataset, err)
	}
	defer file.Close()
	var r io.Reader
	if f.zstd {
		dec, err := zstd.NewReader(file, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return invalidFile(f.dataset, f.path, "zstd: %v", err)
		}
		defer dec.Close()
		r = dec
	} else {
		dec, err := gzip.NewReader(file)
		if err != nil {
			return invalidFile(f.dataset, f.path, "gzip: %v", err)
		}
		defer dec.Close()
		r = dec
	}
	br := bufio.NewReaderSize(r, 1<<20)
	var (
		long   []byte // a line longer than br's buffer, assembled
		lineNo uint64
		pos    uint64 // uncompressed byte offset of the line
	)
	for {
		chunk, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(long)+len(chunk) > MaxLineBytes {
				return invalidFile(f.dataset, f.path, "line %d (byte %d): longer than %d bytes", lineNo+1, pos, MaxLineBytes)
			}
			long = append(long, chunk...)
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return invalidFile(f.dataset, f.path, "line %d (byte %d): decompressing: %v", lineNo+1, pos, err)
		}
		line := chunk
		if long != nil {
			line = append(long, chunk...)
			long = long[:0]
		}
		if len(line) > 0 {
			lineNo++
			text, reason := parseRecord(bytes.TrimSuffix(line, []byte{'\n'}), f.field)
			if reason != "" {
				e := &BadRecordError{Dataset: f.dataset, Path: f.path,
					Where: fmt.Sprintf("line %d (byte %d)", lineNo, pos), Field: f.field, Reason: reason}
				if err := bad(e); err != nil {
					return err
				}
			} else if text != nil {
				if err := visit(text); err != nil {
					return err
				}
			}
			pos += uint64(len(line))
		}
		if err != nil {
			return nil // io.EOF
		}
	}
}

func (f *zjsonlFile) file() source.File { return source.File{Path: f.path, Size: f.size} }

func (f *zjsonlFile) close() error { return nil }

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
