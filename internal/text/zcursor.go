package text

import (
	"bufio"
	"errors"
	"io"

	"github.com/klauspost/compress/gzip" // the standard library's API, faster (docs/benchmarks.md, "Library choices measured")
	"github.com/klauspost/compress/zstd"

	"github.com/dataloaderd/dataloaderd/internal/source"
)

// assembled from several reads.
const zcursorBuffer = 64 << 10

// zcursor is a decoder of one compressed file positioned at the start of
// unit next: every line starting before next*B has been read, none after.
// Fields from file on belong to whoever holds the cursor (busy); the rest
// are guarded by the pool's mutex.
type zcursor struct {
	f            *zjsonlFile
	busy         bool
	skipped      bool   // while busy: done skipping to target (its stash, if any, is out)
	from, target uint64 // while busy: next when taken, and the unit asked for
	used         uint64
	stash        *zstash

	file   io.Closer // the file or object the decoder reads
	zr     *zstd.Decoder
	gr     *gzip.Reader
	br     *bufio.Reader
	long   []byte
	pos    uint64 // decompressed offset of the next line
	lineNo uint64 // lines before pos
	next   uint64
}

func (c *zcursor) open() error {
	f := c.f
	var file io.Reader
	if f.blob != nil {
		blob, err := f.blob.Dup(f.fs)
		if err != nil {
			return source.DatasetError(f.dataset, err)
		}
		c.file, file = blob, io.NewSectionReader(blob, 0, f.size)
	} else {
		osf, err := f.fs.Open(f.path)
		if err != nil {
			return source.DatasetError(f.dataset, err)
		}
		c.file, file = osf, osf
	}
	var r io.Reader
	if f.zstd {
		dec, err := zstd.NewReader(file, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
		if err != nil {
			return readFailed(f.dataset, f.path, err, "zstd: %v", err)
		}
		c.zr, r = dec, dec
	} else {
		dec, err := gzip.NewReader(file)
		if err != nil {
			return readFailed(f.dataset, f.path, err, "gzip: %v", err)
		}
		c.gr, r = dec, dec
	}
	c.br = bufio.NewReaderSize(r, zcursorBuffer)
	return nil
}

func (c *zcursor) close() {
	if c.zr != nil {
		c.zr.Close()
	}
	if c.gr != nil {
		c.gr.Close()
	}
	if c.file != nil {
		c.file.Close()
	}
	c.zr, c.gr, c.file, c.br, c.long = nil, nil, nil, nil, nil
}

// line reads the next line, with its newline when it has one, and returns
// its length; the line itself only when keep (valid until the next call).
// It returns io.EOF when no line is left. Only a kept line is bounded by
// MaxLineBytes: skipping one holds no more than the read buffer.
func (c *zcursor) line(keep bool) ([]byte, uint64, error) {
	var n uint64
	if cap(c.long) > 1<<20 {
		c.long = nil // a long line's buffer is not kept for the short ones after it
	}
	c.long = c.long[:0]
	for {
		chunk, err := c.br.ReadSlice('\n')
		n += uint64(len(chunk))
		if errors.Is(err, bufio.ErrBufferFull) {
			if keep {
				if n > MaxLineBytes {
					return nil, 0, invalidFile(c.f.dataset, c.f.path, "line %d (byte %d): longer than %d bytes", c.lineNo+1, c.pos, MaxLineBytes)
				}
				c.long = append(c.long, chunk...)
			}
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, 0, readFailed(c.f.dataset, c.f.path, err, "line %d (byte %d): decompressing: %v", c.lineNo+1, c.pos, err)
		}
		if n == 0 {
			return nil, 0, io.EOF
		}
		if !keep {
			return nil, n, nil
		}
		if len(c.long) > 0 {
			c.long = append(c.long, chunk...)
			return c.long, n, nil
		}
		return chunk, n, nil
	}
}

// skipTo moves the cursor to the start of unit k (>= next) without parsing
// what it passes, stashing the lines of unit k-1 when it passes them all.
func (c *zcursor) skipTo(k uint64) error {
	b := c.f.block
	var st *zstash
	if k > 0 && c.next < k {
		st = &zstash{unit: k - 1, line: 0}
	}
	for start := k * b; c.pos < start; {
		keep := st != nil && c.pos >= (k-1)*b
		if keep && st.line == 0 {
			st.line, st.pos = c.lineNo+1, c.pos
		}
		line, n, err := c.line(keep)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if keep {
			st.raw = appendLine(st.raw, line)
		}
		c.pos += n
		c.lineNo++
	}
	c.next = k
	p := c.f.pool
	p.mu.Lock()
	// Published now, not when the cursor is released: a reader of k-1
	// waiting for it must not wait for unit k's read (for the last unit,
	// the whole rest of the file).
	c.skipped = true
	if st != nil {
		c.stash = st
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	if st != nil {
		p.notePeak(uint64(len(st.raw)))
	}
	return nil
}

// appendLine appends a line to raw, ending it with a newline.
func appendLine(raw, line []byte) []byte {
	raw = append(raw, line...)
	if line[len(line)-1] != '\n' {
		raw = append(raw, '\n')
	}
	return raw
}

// read returns unit k's lines (k is not the file's last unit), each ended
// by a newline, with the number and offset of the first.
func (c *zcursor) read(k uint64) ([]byte, uint64, uint64, error) {
	if err := c.skipTo(k); err != nil {
		return nil, 0, 0, err
	}
	var raw []byte
	first, firstPos := c.lineNo+1, c.pos
	for end := (k + 1) * c.f.block; c.pos < end; {
		line, n, err := c.line(true)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, 0, 0, err
		}
		if raw == nil {
			raw = make([]byte, 0, c.f.block+c.f.block/8)
		}
		raw = appendLine(raw, line)
		c.pos += n
		c.lineNo++
	}
	c.next = k + 1
	c.f.pool.notePeak(uint64(len(raw)))
	return raw, first, firstPos, nil
}

// stream calls each with every line of unit k and the lines after it, as
// they are decompressed.
func (c *zcursor) stream(k uint64, each func(line []byte, lineNo, pos uint64) error) error {
	if err := c.skipTo(k); err != nil {
		return err
	}
	for {
		line, n, err := c.line(true)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		c.f.pool.notePeak(n)
		if err := each(line, c.lineNo+1, c.pos); err != nil {
			return err
		}
		c.pos += n
		c.lineNo++
	}
	c.next = c.f.n
	return nil
}
