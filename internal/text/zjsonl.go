package text

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/gzip" // the standard library's API, decompressing about 1.3x as fast here
	"github.com/klauspost/compress/zstd"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/source"
)

// A compressed JSONL file cannot be entered in the middle, and building an
// index of restart points would mean decompressing it at open. So its units
// are cut by the decompressed offsets of its lines, with their number taken
// from a size hint its own header carries, and they are read by decoders
// that move forward through the file.
//
// With hint D and block B (Spec.BlockBytes) the file has n = max(1,
// ceil(D/B)) units: unit k < n-1 holds the lines whose first byte is at a
// decompressed offset in [k*B, (k+1)*B), and unit n-1 every line from
// (n-1)*B on. That partitions the lines whatever the real size: a hint too
// large leaves trailing units empty, one too small makes the last unit
// larger. Correctness never rests on the hint, only memory does.
//
// A file with no usable hint is one unit, read whole as a stream.

// MaxHintRatio bounds a plausible size hint: a hint smaller than the file's
// compressed size, or more than MaxHintRatio times it, is not used.
const MaxHintRatio = 1000

// gzipTargetRatio is the compression ratio assumed when a gzip trailer's
// size modulo 2^32 allows several plausible sizes: the one nearest to it
// (by ratio) is taken. It leans high because a hint too large costs empty
// units while one too small makes the last unit large.
const gzipTargetRatio = 5

// DefaultDecoders is the number of decoders of compressed files a dataset
// keeps open when Spec.Decoders is 0.
const DefaultDecoders = 16

// zstdHint returns the content size of the first zstd frame when its
// header records one and it is plausible for a file of size bytes, else 0.
// A file of several frames has only the first one's size here: the hint is
// then too small and the file's last unit holds the rest.
func zstdHint(head []byte, size uint64) uint64 {
	var h zstd.Header
	if err := h.Decode(head); err != nil || h.Skippable || !h.HasFCS {
		return 0
	}
	if !plausible(h.FrameContentSize, size) {
		return 0
	}
	return h.FrameContentSize
}

// zstdWindow is the window size the first zstd frame's header asks a
// decoder to keep (the memory each decoder of the file holds), or 0 when
// the header cannot be read.
func zstdWindow(head []byte) uint64 {
	var h zstd.Header
	if err := h.Decode(head); err != nil || h.Skippable {
		return 0
	}
	if h.SingleSegment { // no window descriptor: the frame is its own window
		return h.FrameContentSize
	}
	return h.WindowSize
}

// gzipHint returns the decompressed size of a gzip file of size bytes whose
// trailer says isize (the size modulo 2^32 of its last member), or 0 when
// no plausible size agrees with it. Of the plausible sizes isize + j*2^32,
// it takes the one nearest to gzipTargetRatio times size, by ratio: for a
// file under about 4 MiB that is isize itself, the only plausible one.
func gzipHint(isize uint32, size uint64) uint64 {
	if size == 0 {
		return 0
	}
	target := size * gzipTargetRatio
	var best uint64
	for d := uint64(isize); plausibleMax(d, size); d += 1 << 32 {
		if d < size {
			continue
		}
		if best == 0 || nearer(d, best, target) {
			best = d
		}
	}
	return best
}

// gzipAmbiguous reports whether a gzip file of size bytes whose trailer
// says isize could hold more than one text size at ordinary JSONL
// compression ratios (1.5x to 12x): its size is then a guess, possibly off
// by a multiple of 4 GiB, and its units uneven (trailing ones empty, or the
// last one large).
func gzipAmbiguous(isize uint32, size uint64) bool {
	lo, hi := size*3/2, size*12
	n := 0
	for d := uint64(isize); d <= hi; d += 1 << 32 {
		if d >= lo {
			n++
		}
	}
	return n > 1
}

// nearer reports whether a is strictly nearer than b to t by ratio
// (max(x,t)/min(x,t)), compared exactly in integers.
func nearer(a, b, t uint64) bool {
	ah, al := max(a, t), min(a, t)
	bh, bl := max(b, t), min(b, t)
	// ah/al < bh/bl  <=>  ah*bl < bh*al
	x1, x0 := bits.Mul64(ah, bl)
	y1, y0 := bits.Mul64(bh, al)
	return x1 < y1 || (x1 == y1 && x0 < y0)
}

func plausibleMax(d, size uint64) bool {
	return d/MaxHintRatio < size || (d/MaxHintRatio == size && d%MaxHintRatio == 0)
}

// plausible reports whether d bytes of text could be a file of size
// compressed bytes: size <= d <= MaxHintRatio*size.
func plausible(d, size uint64) bool { return d >= size && size > 0 && plausibleMax(d, size) }

// zjsonlFile is a compressed JSONL file (gzip or zstd, by magic number), in
// n units cut by a size hint (see above). Its byte size for shard cutting is
// the compressed size, spread evenly over the units.
type zjsonlFile struct {
	fs                   files.Dataset // reopens the file for each decoder
	dataset, path, field string
	size                 int64 // compressed
	zstd                 bool
	hint                 uint64 // usable decompressed size hint; 0: none
	window               uint64 // zstd: the decoder window its header asks for
	ambiguous            bool   // gzip: its hint is one of several plausible sizes
	block                uint64
	n                    uint64
	pool                 *decoderPool
	closed               bool // guarded by pool.mu
}

func (f *zjsonlFile) setUnits() {
	f.n = 1
	if f.hint > 0 {
		f.n = max(1, f.hint/f.block+min(f.hint%f.block, 1))
	}
}

func (f *zjsonlFile) units() uint64 { return f.n }

// bytes is the file's text size as its hint gives it, so that shards cut
// by bytes weigh compressed and plain files alike; without a hint, the
// compressed size.
func (f *zjsonlFile) bytes() uint64 {
	if f.hint > 0 {
		return f.hint
	}
	return uint64(f.size)
}

// offset is where unit k's text starts by the hint (k*B), monotone; 0 for a
// file without one (a single unit).
func (f *zjsonlFile) offset(k uint64) uint64 {
	if f.hint == 0 || k >= f.n {
		return min(k, 1) * f.bytes()
	}
	return min(k*f.block, f.hint)
}

func (f *zjsonlFile) file() source.File { return source.File{Path: f.path, Size: f.size} }

func (f *zjsonlFile) close() error {
	f.pool.closeFile(f)
	return nil
}

// docs visits unit k's documents. Lines of a unit other than the last are
// decompressed into a buffer (about B bytes plus one line) while the file's
// decoder is held, and parsed and visited after it is handed back, so that
// the next unit of the file can be decompressed meanwhile. The last unit,
// whose size the hint does not bound, is visited line by line as it is
// decompressed.
func (f *zjsonlFile) docs(k uint64, visit func([]byte) error, bad func(*BadRecordError) error) error {
	c, st, err := f.pool.acquire(f, k)
	if err != nil {
		return err
	}
	if st != nil {
		return f.parse(st.raw, st.line, st.pos, visit, bad)
	}
	// The cursor goes back whatever happens, a panic of the tokenizer in
	// visit included (Cache turns those into errors): a cursor left busy
	// would make later reads of this file wait for it forever.
	held, ok := true, false
	defer func() {
		if held {
			f.pool.release(c, ok)
		}
	}()
	if k == f.n-1 {
		err := c.stream(k, func(line []byte, lineNo, pos uint64) error {
			return f.record(line, lineNo, pos, visit, bad)
		})
		ok = err == nil
		return err
	}
	raw, line, pos, err := c.read(k)
	held = false
	f.pool.release(c, err == nil)
	if err != nil {
		return err
	}
	return f.parse(raw, line, pos, visit, bad)
}

// parse visits the records of raw, whole lines each ending in a newline,
// the first being line number line at decompressed offset pos.
func (f *zjsonlFile) parse(raw []byte, line, pos uint64, visit func([]byte) error, bad func(*BadRecordError) error) error {
	for len(raw) > 0 {
		i := indexNewline(raw)
		if err := f.record(raw[:i+1], line, pos, visit, bad); err != nil {
			return err
		}
		raw = raw[i+1:]
		line++
		pos += uint64(i + 1)
	}
	return nil
}

func indexNewline(b []byte) int {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return i
	}
	return len(b) - 1
}

// record parses one line (with its newline, if any) and visits its text.
func (f *zjsonlFile) record(line []byte, lineNo, pos uint64, visit func([]byte) error, bad func(*BadRecordError) error) error {
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
	}
	text, reason := parseRecord(line, f.field)
	if reason != "" {
		return bad(&BadRecordError{Dataset: f.dataset, Path: f.path,
			Where: fmt.Sprintf("line %d (byte %d)", lineNo, pos), Field: f.field, Reason: reason})
	}
	if text != nil {
		return visit(text)
	}
	return nil
}

// decoderPool keeps the decoders of a dataset's compressed files, each a
// cursor at the start of some unit of its file, so that reading a file's
// units in order decompresses it once. It holds at most max idle cursors
// (least recently used are closed first).
type decoderPool struct {
	max     int
	mu      sync.Mutex
	cond    sync.Cond
	cursors []*zcursor
	tick    uint64

	starts atomic.Uint64 // decoders started at a file's beginning
	peak   atomic.Uint64 // most bytes of text one read held at once
}

func newDecoderPool(max int) *decoderPool {
	if max <= 0 {
		max = DefaultDecoders
	}
	p := &decoderPool{max: max}
	p.cond.L = &p.mu
	return p
}

// zstash is the lines of a unit a cursor skipped whole on its way to a
// later one (a worker got to unit k+1 of a file before the one reading k):
// the reader of that unit takes them instead of decompressing again.
type zstash struct {
	unit      uint64
	raw       []byte
	line, pos uint64
}

// acquire returns a cursor of f at or before the start of unit k, for the
// caller alone until release, or that unit's lines when a cursor stashed
// them. It waits for a cursor in use that will end up there rather than
// start a new one; failing both it starts a decoder at the file's start.
func (p *decoderPool) acquire(f *zjsonlFile, k uint64) (*zcursor, *zstash, error) {
	p.mu.Lock()
	for {
		if f.closed {
			p.mu.Unlock()
			return nil, nil, errClosed
		}
		var free, busy *zcursor
		var freeAt, busyAt uint64
		for _, c := range p.cursors {
			if c.f != f {
				continue
			}
			if c.stash != nil && c.stash.unit == k {
				st := c.stash
				c.stash = nil
				p.mu.Unlock()
				return nil, st, nil
			}
			switch {
			case !c.busy:
				if c.next <= k && (free == nil || c.next > freeAt) {
					free, freeAt = c, c.next
				}
			case c.target < k:
				if busy == nil || c.target+1 > busyAt {
					busy, busyAt = c, c.target+1
				}
			case c.target == k+1 && c.from < k+1 && !c.skipped:
				busy, busyAt = c, k // will stash unit k
			}
		}
		if free != nil && (busy == nil || freeAt >= busyAt) {
			free.busy, free.from, free.target, free.skipped = true, free.next, k, false
			p.mu.Unlock()
			return free, nil, nil
		}
		if busy == nil {
			break
		}
		p.cond.Wait()
	}
	c := &zcursor{f: f, busy: true, target: k}
	p.cursors = append(p.cursors, c)
	p.evict()
	p.starts.Add(1)
	p.mu.Unlock()
	if err := c.open(); err != nil {
		p.release(c, false)
		return nil, nil, err
	}
	return c, nil, nil
}

// release hands a cursor back; a failed one (!ok), one at its file's end
// or one of a closed file is closed.
func (p *decoderPool) release(c *zcursor, ok bool) {
	p.mu.Lock()
	c.busy = false
	p.tick++
	c.used = p.tick
	switch {
	case !ok || c.f.closed || (c.next >= c.f.n && c.stash == nil):
		p.remove(c)
	case c.next >= c.f.n:
		// At the file's end with a stash no reader has taken yet: the
		// decoder goes, the stash stays until taken or evicted.
		c.close()
	}
	p.evict()
	p.cond.Broadcast()
	p.mu.Unlock()
}

// evict closes idle cursors, least recently used first, down to max.
func (p *decoderPool) evict() {
	for len(p.cursors) > p.max {
		var old *zcursor
		for _, c := range p.cursors {
			if !c.busy && (old == nil || c.used < old.used) {
				old = c
			}
		}
		if old == nil {
			return
		}
		p.remove(old)
	}
}

// remove drops a cursor from the pool and closes it; p.mu is held.
func (p *decoderPool) remove(c *zcursor) {
	for i, x := range p.cursors {
		if x == c {
			p.cursors = append(p.cursors[:i], p.cursors[i+1:]...)
			break
		}
	}
	c.close()
}

// closeFile closes f's idle cursors and marks f closed, so that its busy
// ones are closed when released and no new one starts.
func (p *decoderPool) closeFile(f *zjsonlFile) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f.closed = true
	for i := 0; i < len(p.cursors); {
		if c := p.cursors[i]; c.f == f && !c.busy {
			p.remove(c)
			continue
		}
		i++
	}
	p.cond.Broadcast()
}

func (p *decoderPool) notePeak(n uint64) {
	for {
		old := p.peak.Load()
		if n <= old || p.peak.CompareAndSwap(old, n) {
			return
		}
	}
}

// zcursorBuffer is the read buffer of a decoder; a longer line is
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

	file   *os.File
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
	file, err := f.fs.Open(f.path)
	if err != nil {
		return source.DatasetError(f.dataset, err)
	}
	c.file = file
	var r io.Reader
	if f.zstd {
		dec, err := zstd.NewReader(file, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
		if err != nil {
			return invalidFile(f.dataset, f.path, "zstd: %v", err)
		}
		c.zr, r = dec, dec
	} else {
		dec, err := gzip.NewReader(file)
		if err != nil {
			return invalidFile(f.dataset, f.path, "gzip: %v", err)
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
			return nil, 0, invalidFile(c.f.dataset, c.f.path, "line %d (byte %d): decompressing: %v", c.lineNo+1, c.pos, err)
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
