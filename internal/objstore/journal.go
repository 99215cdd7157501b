// The journal of a disk cache entry: which blocks of its data file are
// whole, each with the CRC-32C of its bytes.

package objstore

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// castagnoli is the CRC-32C table: the hardware's instruction where there
// is one, many GB/s.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// journalMagic opens every journal; the 1 is the format's version.
const journalMagic = "DLDJRNL1"

// maxJournalHeader bounds the header: a URL of a bucket and a 1,024-byte
// key, an ETag of 256 bytes, numbers.
const maxJournalHeader = 4 << 10

// recordLen is one record: the block's index (its top bit set: the block
// was evicted), the CRC-32C of its bytes, the CRC-32C of those 12 bytes.
const recordLen = 16

const evictedBit = uint64(1) << 63

// journalHeader says which object version and block size an entry holds:
// checked against the object opened, so an entry is never read as another.
type journalHeader struct {
	URL      string `json:"url"`
	Size     int64  `json:"size"`
	ETag     string `json:"etag,omitempty"`
	Modified int64  `json:"modified,omitempty"` // Unix seconds; 0 with an ETag
	Block    int64  `json:"block"`
}

func headerOf(url string, v version, bs int64) journalHeader {
	h := journalHeader{URL: url, Size: v.size, ETag: v.etag, Block: bs}
	if !v.modified.IsZero() {
		h.Modified = v.modified.Unix()
	}
	return h
}

// blocks is how many blocks of h.Block the object has.
func (h journalHeader) blocks() int64 { return (h.Size + h.Block - 1) / h.Block }

// bytesOf is the length of block i of the object.
func (h journalHeader) bytesOf(i int64) int64 { return min(h.Block, h.Size-i*h.Block) }

// sameAs reports whether h names the version v of url in blocks of bs.
func (h journalHeader) sameAs(url string, v version, bs int64) bool {
	return h == headerOf(url, v, bs)
}

// writeHeader writes a journal's start: magic, length, JSON, CRC-32C.
func writeHeader(w io.Writer, h journalHeader) error {
	js, err := json.Marshal(h)
	if err != nil {
		return err
	}
	buf := append([]byte(journalMagic), 0, 0, 0, 0)
	binary.LittleEndian.PutUint32(buf[len(journalMagic):], uint32(len(js)))
	buf = append(buf, js...)
	buf = binary.LittleEndian.AppendUint32(buf, crc32.Checksum(js, castagnoli))
	_, err = w.Write(buf)
	return err
}

// record encodes one record.
func record(i int64, sum uint32, evicted bool) [recordLen]byte {
	var r [recordLen]byte
	u := uint64(i)
	if evicted {
		u |= evictedBit
	}
	binary.LittleEndian.PutUint64(r[:8], u)
	binary.LittleEndian.PutUint32(r[8:12], sum)
	binary.LittleEndian.PutUint32(r[12:], crc32.Checksum(r[:12], castagnoli))
	return r
}

// replayed is what a journal says: its header, the blocks whole (index to
// CRC-32C), how many records it holds and where the last whole one ends.
type replayed struct {
	header  journalHeader
	live    map[int64]uint32
	records int
	end     int64
}

// liveBytes is the bytes of the blocks whole.
func (r *replayed) liveBytes() int64 {
	var n int64
	for i := range r.live {
		n += r.header.bytesOf(i)
	}
	return n
}

// replay reads the journal at path. A record cut short or whose CRC fails
// (a crash while it was written) ends it: what follows is not read.
func replay(path string) (*replayed, error) { return replayTo(path, -1) }

// replayTo is replay of the first n bytes of the journal at path (n < 0:
// all of it).
func replayTo(path string, n int64) (*replayed, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var in io.Reader = f
	if n >= 0 {
		in = io.LimitReader(f, n)
	}
	br := bufio.NewReaderSize(in, 64<<10)
	var head [len(journalMagic) + 4]byte
	if _, err := io.ReadFull(br, head[:]); err != nil || string(head[:len(journalMagic)]) != journalMagic {
		return nil, fmt.Errorf("%s: not a cache journal (magic %q)", path, head[:len(journalMagic)])
	}
	hn := binary.LittleEndian.Uint32(head[len(journalMagic):])
	if hn > maxJournalHeader {
		return nil, fmt.Errorf("%s: header of %d bytes, more than %d", path, hn, maxJournalHeader)
	}
	js := make([]byte, hn+4)
	if _, err := io.ReadFull(br, js); err != nil {
		return nil, fmt.Errorf("%s: header cut short: %w", path, err)
	}
	if crc32.Checksum(js[:hn], castagnoli) != binary.LittleEndian.Uint32(js[hn:]) {
		return nil, fmt.Errorf("%s: header CRC-32C mismatch", path)
	}
	r := &replayed{live: map[int64]uint32{}, end: int64(len(head)) + int64(hn) + 4}
	if err := json.Unmarshal(js[:hn], &r.header); err != nil {
		return nil, fmt.Errorf("%s: header: %w", path, err)
	}
	if h := r.header; h.Block <= 0 || h.Size <= 0 || h.Size > MaxObjectSize {
		return nil, fmt.Errorf("%s: header says %d bytes in blocks of %d", path, h.Size, h.Block)
	}
	var rec [recordLen]byte
	for {
		if _, err := io.ReadFull(br, rec[:]); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return r, nil
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if !r.apply(rec[:]) {
			return r, nil // torn: the crash came while it was written
		}
	}
}

// apply adds one record to r; false (r unchanged) when its CRC fails or
// its block is past the object's end.
func (r *replayed) apply(rec []byte) bool {
	if crc32.Checksum(rec[:12], castagnoli) != binary.LittleEndian.Uint32(rec[12:recordLen]) {
		return false
	}
	u := binary.LittleEndian.Uint64(rec[:8])
	i := int64(u &^ evictedBit)
	if i >= r.header.blocks() {
		return false
	}
	if u&evictedBit != 0 {
		delete(r.live, i)
	} else {
		r.live[i] = binary.LittleEndian.Uint32(rec[8:12])
	}
	r.records++
	r.end += recordLen
	return true
}

// writeLive writes a journal of r's live blocks alone: its header, then a
// record of each, in the order of the blocks.
func writeLive(w io.Writer, r *replayed) (int64, error) {
	bw := bufio.NewWriter(w)
	cw := &countingWriter{w: bw}
	err := writeHeader(cw, r.header)
	for _, i := range slices.Sorted(maps.Keys(r.live)) {
		if err != nil {
			break
		}
		rec := record(i, r.live[i], false)
		_, err = cw.Write(rec[:])
	}
	return cw.n, errors.Join(err, bw.Flush())
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// rewrite writes a journal holding only r's live blocks in place of the one
// at path: a temporary file beside it, synced, renamed over it, the
// directory synced.
func rewrite(path string, r *replayed) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = writeLive(f, r)
	err = errors.Join(err, f.Sync(), f.Close())
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	r.records = len(r.live)
	r.end = -1 // the file's length now: not truncated again
	return syncDir(path)
}

// syncDir syncs the directory holding path, so that a rename in it lasts.
func syncDir(path string) error {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// touch marks an entry used now: the oldest used go first.
func touch(path string) {
	now := time.Now()
	os.Chtimes(path, now, now)
}
