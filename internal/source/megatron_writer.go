package source

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// MegatronWriter writes one Megatron indexed dataset (PREFIX.bin and
// PREFIX.idx, MMIDIDX version 1) document by document. Both files are written
// under temporary names and renamed into place by Commit, the .idx last, so
// a PREFIX.idx that exists always belongs to a complete dataset: a prepare
// run that was interrupted finds its finished outputs by their .idx.
type MegatronWriter struct {
	prefix  string
	dtype   dtype
	bin     *os.File
	binBuf  *bufio.Writer
	scratch []byte
	lengths []int32
	bytes   uint64
	done    bool
}

// NewMegatronWriter starts PREFIX.bin and PREFIX.idx with tokens stored as
// uint16 when every id is below 65536 (maxID < 65536), else as int32.
func NewMegatronWriter(prefix string, maxID int32) (*MegatronWriter, error) {
	dt := dtInt32
	if maxID >= 0 && maxID < 1<<16 {
		dt = dtUint16
	}
	if err := os.MkdirAll(filepath.Dir(prefix), 0o755); err != nil {
		return nil, err
	}
	bin, err := os.Create(prefix + ".bin.tmp")
	if err != nil {
		return nil, err
	}
	return &MegatronWriter{prefix: prefix, dtype: dt, bin: bin, binBuf: bufio.NewWriterSize(bin, 1<<20)}, nil
}

// Add appends one document.
func (w *MegatronWriter) Add(doc []int32) error {
	if len(doc) > math.MaxInt32 {
		return fmt.Errorf("megatron writer %s: a document of %d tokens does not fit the index's int32 lengths", w.prefix, len(doc))
	}
	size := int(w.dtype.size())
	if cap(w.scratch) < len(doc)*size {
		w.scratch = make([]byte, len(doc)*size)
	}
	b := w.scratch[:len(doc)*size]
	for i, t := range doc {
		switch {
		case t < 0 || (w.dtype == dtUint16 && t >= 1<<16):
			return fmt.Errorf("megatron writer %s: token %d does not fit %v", w.prefix, t, w.dtype)
		case w.dtype == dtUint16:
			binary.LittleEndian.PutUint16(b[2*i:], uint16(t))
		default:
			binary.LittleEndian.PutUint32(b[4*i:], uint32(t))
		}
	}
	if _, err := w.binBuf.Write(b); err != nil {
		return err
	}
	w.lengths = append(w.lengths, int32(len(doc)))
	w.bytes += uint64(len(b))
	return nil
}

// Documents is the number of documents added.
func (w *MegatronWriter) Documents() int { return len(w.lengths) }

// Commit flushes, syncs and renames both files into place (.bin, then .idx).
func (w *MegatronWriter) Commit() error {
	if w.done {
		return fmt.Errorf("megatron writer %s: already committed or aborted", w.prefix)
	}
	w.done = true
	if err := w.binBuf.Flush(); err != nil {
		w.abort()
		return err
	}
	if err := w.bin.Sync(); err != nil {
		w.abort()
		return err
	}
	if err := w.bin.Close(); err != nil {
		w.abort()
		return err
	}
	idx, err := os.Create(w.prefix + ".idx.tmp")
	if err != nil {
		w.abort()
		return err
	}
	buf := bufio.NewWriterSize(idx, 1<<20)
	n := uint64(len(w.lengths))
	var head [megatronHeaderSize]byte
	copy(head[:], megatronMagic)
	h := head[len(megatronMagic):]
	binary.LittleEndian.PutUint64(h, megatronVersion)
	h[8] = byte(w.dtype)
	binary.LittleEndian.PutUint64(h[9:], n)
	binary.LittleEndian.PutUint64(h[17:], n+1)
	buf.Write(head[:])
	var word [8]byte
	for _, l := range w.lengths {
		binary.LittleEndian.PutUint32(word[:], uint32(l))
		buf.Write(word[:4])
	}
	var ptr uint64
	for _, l := range w.lengths {
		binary.LittleEndian.PutUint64(word[:], ptr)
		buf.Write(word[:])
		ptr += uint64(l) * w.dtype.size()
	}
	for i := uint64(0); i <= n; i++ {
		binary.LittleEndian.PutUint64(word[:], i)
		buf.Write(word[:])
	}
	err = buf.Flush()
	if err == nil {
		err = idx.Sync()
	}
	if cerr := idx.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(w.prefix+".bin.tmp", w.prefix+".bin")
	}
	if err == nil {
		err = os.Rename(w.prefix+".idx.tmp", w.prefix+".idx")
	}
	if err != nil {
		w.abort()
		return fmt.Errorf("megatron writer %s: %w", w.prefix, err)
	}
	if d, err := os.Open(filepath.Dir(w.prefix)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// Abort removes the temporary files.
func (w *MegatronWriter) Abort() {
	if !w.done {
		w.done = true
		w.abort()
	}
}

func (w *MegatronWriter) abort() {
	w.bin.Close()
	os.Remove(w.prefix + ".bin.tmp")
	os.Remove(w.prefix + ".idx.tmp")
}
