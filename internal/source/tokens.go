package source

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/dataloaderd/dataloaderd/internal/files"
)

// The llm.c token file header: 256 little-endian int32, of which [0] is the
// magic, [1] the version (1: uint16 tokens, 2: uint32 tokens) and [2] the
// token count. Tokens follow it.
const (
	llmcMagic       = 20240520
	llmcHeaderBytes = 256 * 4
)

// tokenLayout is what a Spec says about flat token files.
type tokenLayout struct {
	dtype  dtype  // token type of files without an llm.c header
	eos    int64  // document separator
	blocks uint64 // nominal tokens per unit
}

// parseTokenLayout checks the flat-file fields of spec.
func parseTokenLayout(spec Spec) (tokenLayout, error) {
	layout := tokenLayout{eos: spec.EOS, blocks: spec.BlockTokens}
	switch spec.Dtype {
	case "", "uint16":
		layout.dtype = dtUint16
	case "uint32":
		layout.dtype = dtUint32
	default:
		return layout, fmt.Errorf(`%w: dataset %q: dtype %q: want "uint16" or "uint32"`, ErrInvalid, spec.Name, spec.Dtype)
	}
	if layout.blocks == 0 {
		layout.blocks = DefaultBlockTokens
	}
	return layout, nil
}

// tokenFile is one flat token file. Its documents end in EOS and are not
// indexed: unit b is nominally tokens [b*B, (b+1)*B), with both ends moved
// forward to just after the next EOS (see snap), so units hold whole
// documents, every token is in exactly one unit, and a unit may be empty
// when a document is longer than B.
type tokenFile struct {
	dataset    string
	path       string
	blob       *files.Blob
	mapping    []byte // blob.Data
	data       []byte // the tokens, after any header
	dtype      dtype
	eos        []byte // the EOS token as it is stored
	blocks     uint64 // B
	tokenCount uint64

	lastLongScan atomic.Pointer[eosFreeSpan]
}

// openTokenFile maps one flat token file and checks its header or size.
func openTokenFile(fs files.Dataset, path string, layout tokenLayout) (_ *tokenFile, err error) {
	f := &tokenFile{dataset: fs.Name, path: path, dtype: layout.dtype, blocks: layout.blocks}
	if f.blob, err = loadFile(fs, path); err != nil {
		return nil, err
	}
	f.mapping = f.blob.Data
	defer func() {
		if err != nil {
			f.close()
		}
	}()
	f.data = f.mapping
	size := uint64(len(f.mapping))
	head := min(size, llmcHeaderBytes)
	if err := f.blob.Hold(0, head); err != nil {
		return nil, holdError(f.dataset, err)
	}
	defer f.blob.Release(0, head)
	if size >= 4 && binary.LittleEndian.Uint32(f.mapping) == llmcMagic {
		if size < llmcHeaderBytes {
			return nil, f.error("llm.c header truncated: file has %d bytes, the header alone needs %d", size, llmcHeaderBytes)
		}
		switch version := binary.LittleEndian.Uint32(f.mapping[4:]); version {
		case 1:
			f.dtype = dtUint16
		case 2:
			f.dtype = dtUint32
		default:
			return nil, f.error("llm.c header version %d, want 1 (uint16 tokens) or 2 (uint32 tokens)", version)
		}
		count := int32(binary.LittleEndian.Uint32(f.mapping[8:]))
		if count < 0 {
			return nil, f.error("llm.c header token count %d is negative", count)
		}
		if want := llmcHeaderBytes + uint64(count)*f.dtype.size(); size != want {
			return nil, f.error("llm.c header says %d %v tokens: expected %d bytes, file has %d",
				count, f.dtype, want, size)
		}
		f.data = f.mapping[llmcHeaderBytes:]
	} else if size%f.dtype.size() != 0 {
		return nil, f.error("size %d bytes is not a multiple of the %d-byte %v token (no llm.c header; set dtype?)",
			size, f.dtype.size(), f.dtype)
	}
	if layout.eos < 0 || uint64(layout.eos) >= 1<<(8*f.dtype.size()) {
		return nil, f.error("eos_id %d does not fit %v tokens", layout.eos, f.dtype)
	}
	f.eos = binary.LittleEndian.AppendUint32(nil, uint32(layout.eos))[:f.dtype.size()]
	f.tokenCount = uint64(len(f.data)) / f.dtype.size()
	return f, nil
}

func (f *tokenFile) error(format string, args ...any) error {
	return invalidFile(f.dataset, f.path, format, args...)
}

func (f *tokenFile) units() uint64 {
	return f.tokenCount/f.blocks + min(f.tokenCount%f.blocks, 1)
}

func (f *tokenFile) tokens() uint64 { return f.tokenCount }

// offset is unit b's nominal start.
func (f *tokenFile) offset(b uint64) uint64 {
	if b >= f.units() {
		return f.tokenCount
	}
	return b * f.blocks
}

// nominalEnd is the end of unit b < units() before snapping.
func (f *tokenFile) nominalEnd(b uint64) uint64 {
	start := b * f.blocks
	return start + min(f.blocks, f.tokenCount-start)
}

// snap moves position x forward to just after the next EOS: the smallest
// p >= x with token p-1 == EOS, or the file's end. 0 and the end stay put.
// A scan longer than a block (a document longer than B, which every read of
// its units would rescan) is remembered in lastLongScan.
func (f *tokenFile) snap(x uint64) (uint64, error) {
	if x == 0 || x >= f.tokenCount {
		return min(x, f.tokenCount), nil
	}
	if span := f.lastLongScan.Load(); span != nil && span.from <= x && x <= span.end {
		return span.end, nil
	}
	end, err := f.findEOS(x - 1)
	if err != nil {
		return 0, err
	}
	if end < f.tokenCount {
		end++ // just after it
	}
	if end-x > f.blocks {
		f.lastLongScan.Store(&eosFreeSpan{from: x, end: end})
	}
	return end, nil
}

// findEOS returns the position of the first EOS at or after token p, or
// tokenCount. An object's tokens are scanned a cache block at a time; one
// that cannot be fetched is an error (never a boundary).
func (f *tokenFile) findEOS(p uint64) (uint64, error) {
	size := f.dtype.size()
	if !f.blob.Remote() {
		if at := indexAligned(f.data[p*size:], f.eos); at >= 0 {
			return p + uint64(at)/size, nil
		}
		return f.tokenCount, nil
	}
	chunk := max(f.blockTokens(), 1)
	for p < f.tokenCount {
		n := min(chunk, f.tokenCount-p)
		from := f.dataAt() + p*size
		if err := f.blob.Hold(from, n*size); err != nil {
			return 0, holdError(f.dataset, err)
		}
		at := indexAligned(f.data[p*size:(p+n)*size], f.eos)
		f.blob.Release(from, n*size)
		if at >= 0 {
			return p + uint64(at)/size, nil
		}
		p += n
	}
	return f.tokenCount, nil
}

// dataAt is the byte position of token 0 in the file.
func (f *tokenFile) dataAt() uint64 { return uint64(len(f.mapping) - len(f.data)) }

// blockTokens is how many tokens one cache block holds.
func (f *tokenFile) blockTokens() uint64 { return uint64(f.blob.BlockSize()) / f.dtype.size() }

// eosFreeSpan records that snap(from) == end: tokens [from-1, end-1) hold no
// EOS, so snap(x) == end for every x in [from, end] as well.
type eosFreeSpan struct{ from, end uint64 }

// indexAligned returns the first byte index of pattern (one 2- or 4-byte
// token) in data that is a multiple of len(pattern), or -1. bytes.Index does
// the scanning, vectorized on common platforms; after many matches that
// straddle two tokens it goes on token by token instead.
func indexAligned(data, pattern []byte) int {
	width := len(pattern)
	base := 0
	for range 16 {
		at := bytes.Index(data[base:], pattern)
		if at < 0 {
			return -1
		}
		at += base
		if at%width == 0 {
			return at
		}
		base = at - at%width + width
	}
	if width == 2 {
		want := binary.LittleEndian.Uint16(pattern)
		for ; base+2 <= len(data); base += 2 {
			if binary.LittleEndian.Uint16(data[base:]) == want {
				return base
			}
		}
		return -1
	}
	want := binary.LittleEndian.Uint32(pattern)
	for ; base+4 <= len(data); base += 4 {
		if binary.LittleEndian.Uint32(data[base:]) == want {
			return base
		}
	}
	return -1
}

func (f *tokenFile) unitLen(b uint64) (uint64, error) {
	end, err := f.snap(f.nominalEnd(b))
	if err != nil {
		return 0, err
	}
	start, err := f.snap(b * f.blocks)
	return end - start, err
}

// read finds the unit's start, and its end only when the read reaches past
// the nominal end (the actual end is never before it).
func (f *tokenFile) read(b, off uint64, dst []int32) error {
	start, err := f.snap(b * f.blocks)
	if err != nil {
		return err
	}
	nominalEnd := f.nominalEnd(b)
	if off > f.tokenCount-start || uint64(len(dst)) > f.tokenCount-start-off {
		end, err := f.snap(nominalEnd)
		if err != nil {
			return err
		}
		return rangeError(f.path, b, off, len(dst), end-start)
	}
	from := start + off
	if to := from + uint64(len(dst)); to > nominalEnd {
		end, err := f.snap(nominalEnd)
		if err != nil {
			return err
		}
		if to > end {
			return rangeError(f.path, b, off, len(dst), end-start)
		}
	}
	size := f.dtype.size()
	at, n := f.dataAt()+from*size, uint64(len(dst))*size
	if err := f.blob.Hold(at, n); err != nil {
		return holdError(f.dataset, err)
	}
	defer f.blob.Release(at, n)
	src := f.data[from*size : (from+uint64(len(dst)))*size]
	if bad := decodeTokens(f.dtype, src, dst); bad >= 0 {
		return f.error("unit %d, token %d (file token %d): %v value %s is not a token id in [0, 2^31)",
			b, off+uint64(bad), from+uint64(bad), f.dtype, formatToken(f.dtype, src, bad))
	}
	return nil
}

func (f *tokenFile) files() []File {
	return []File{{Path: f.path, Size: int64(len(f.mapping))}}
}

func (f *tokenFile) close() error {
	err := closeBlob(f.blob)
	f.mapping, f.data, f.blob = nil, nil, nil
	return err
}
