package text

import (
	"bytes"
	"fmt"

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

// zjsonlFile is a compressed JSONL file (gzip or zstd, by magic number), in
// n units cut by a size hint (see above). Its byte size for shard cutting is
// the compressed size, spread evenly over the units.
type zjsonlFile struct {
	fs                   files.Dataset // reopens the file for each decoder
	blob                 *files.Blob   // an object's, shared by its decoders; nil for a local file
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
	if f.blob != nil {
		return f.blob.Close()
	}
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
