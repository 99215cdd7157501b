package source

import (
	"encoding/binary"
	"errors"
	"sync/atomic"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/objstore"
)

// Layout of a Megatron MMIDIDX version 1 index (.idx): a 34-byte header, then
// int32 sequence_lengths[N], int64 sequence_pointers[N] (byte offsets into the
// .bin), int64 document_indices[D], and optionally int8 sequence_modes[N].
const (
	megatronMagic      = "MMIDIDX\x00\x00"
	megatronVersion    = 1
	megatronHeaderSize = len(megatronMagic) + 8 + 1 + 8 + 8
)

// sequenceReadHook, when set, sees every read of a sequence's index entry.
// Tests use it to check that Open reads O(1) entries per file.
var sequenceReadHook func(sequence uint64)

// megatronFile is one Megatron .bin/.idx pair; each sequence is one unit.
type megatronFile struct {
	dataset          string
	idxPath, binPath string
	idx, bin         []byte // the blobs' Data
	idxBlob, binBlob *files.Blob
	// idxRemote: the index is an object, read by range: each entry's
	// bytes are held while they are read (megatronidx.go).
	idxRemote    bool
	dtype        dtype
	sequences    uint64       // N
	offsetFailed atomic.Value // error: an entry offset() needed could not be fetched
	lengthsAt    uint64       // byte offset of sequence_lengths in idx
	pointersAt   uint64       // byte offset of sequence_pointers in idx
	firstPointer uint64
	tokenCount   uint64
}

// openMegatronFile maps PREFIX.idx and PREFIX.bin and checks the header, the
// index size and the first and last sequences against the .bin size.
// probes, when set, names the units the opener reads first
// (Spec.OffsetProbes), fetched ahead with the header of an index in
// object storage (megatronguess.go).
func openMegatronFile(fs files.Dataset, prefix string, probes CutProbes) (_ *megatronFile, err error) {
	dataset := fs.Name
	m := &megatronFile{dataset: dataset, idxPath: prefix + ".idx", binPath: prefix + ".bin"}
	defer func() {
		if err != nil {
			m.close()
		}
	}()
	for _, path := range []string{m.idxPath, m.binPath} {
		if _, err := fs.Stat(path); errors.Is(err, files.ErrOutsideRoots) {
			return nil, err
		} else if errors.Is(err, objstore.ErrObject) && !errors.Is(err, objstore.ErrNotFound) {
			return nil, DatasetError(dataset, err) // the store failed: not missing
		} else if err != nil {
			return nil, invalidFile(dataset, path, "missing: a megatron dataset needs both PREFIX.idx and PREFIX.bin")
		}
	}
	if m.idxBlob, err = loadFile(fs, m.idxPath); err != nil {
		return nil, err
	}
	// An object's index is read by range, as the tokens are: its header
	// now, then the entries that cutting shards and the reads need, their
	// blocks in the node's cache like any other.
	m.idx, m.idxRemote = m.idxBlob.Data, m.idxBlob.Remote()
	if m.binBlob, err = loadFile(fs, m.binPath); err != nil {
		return nil, err
	}
	m.bin = m.binBlob.Data
	if m.idxRemote {
		m.prefetchOpen(probes)
	}
	if err := m.parseHeader(); err != nil {
		return nil, err
	}
	if m.idxRemote && m.sequences > 0 {
		// The two entries checkEnds reads, fetched together: one round
		// trip to the store, not two.
		m.prefetchEntry(0)
		m.prefetchEntry(m.sequences - 1)
	}
	if err := m.checkEnds(); err != nil {
		return nil, err
	}
	return m, nil
}

// parseHeader checks the magic, version and dtype, and that the index holds
// exactly its arrays (plus, optionally, one sequence mode byte per sequence).
func (m *megatronFile) parseHeader() error {
	size := uint64(m.idxBlob.Size())
	head := min(size, uint64(megatronHeaderSize))
	if err := m.idxBlob.Hold(0, head); err != nil {
		return holdError(m.dataset, err)
	}
	defer m.idxBlob.Release(0, head)
	if size < uint64(megatronHeaderSize) {
		return m.idxError("%d bytes, shorter than the %d-byte MMIDIDX header", size, megatronHeaderSize)
	}
	if magic := string(m.idx[:len(megatronMagic)]); magic != megatronMagic {
		return m.idxError("magic %q, want %q (not a Megatron MMIDIDX index)", magic, megatronMagic)
	}
	h := m.idx[len(megatronMagic):]
	if version := binary.LittleEndian.Uint64(h); version != megatronVersion {
		return m.idxError("version %d, want %d", version, megatronVersion)
	}
	code := h[8]
	dt, ok := dtypeFromMegatron(code)
	if !ok {
		return m.idxError("dtype code %d, want one of %s", code, megatronDtypeCodes)
	}
	m.dtype = dt
	m.sequences = binary.LittleEndian.Uint64(h[9:])
	documents := binary.LittleEndian.Uint64(h[17:])
	m.lengthsAt = uint64(megatronHeaderSize)
	m.pointersAt = mulAdd(4, m.sequences, m.lengthsAt)
	need := mulAdd(8, documents, mulAdd(12, m.sequences, m.lengthsAt))
	if size < need {
		return m.idxError("%d sequences and %d documents need %d bytes, file has %d (truncated or corrupt index)",
			m.sequences, documents, need, size)
	}
	if extra := size - need; extra != 0 && extra != m.sequences {
		return m.idxError("%d bytes after the document index, want 0 or %d (one sequence mode per sequence)",
			extra, m.sequences)
	}
	return nil
}

// checkEnds checks the first and last sequences and derives the token count
// from them; sequences in between are checked when they are read.
func (m *megatronFile) checkEnds() error {
	if m.sequences == 0 {
		return nil
	}
	first, _, err := m.extent(0)
	if err != nil {
		return err
	}
	lastStart, lastLen, err := m.extent(m.sequences - 1)
	if err != nil {
		return err
	}
	if lastStart < first {
		return m.idxError("last sequence %d starts at byte %d, before the first sequence's byte %d",
			m.sequences-1, lastStart, first)
	}
	m.firstPointer = first
	m.tokenCount = (lastStart-first)/m.dtype.size() + lastLen
	return nil
}

// entry reads sequence i's length and pointer from the index: in place
// from a mapped file, held for the read from an object (remoteEntry).
func (m *megatronFile) entry(i uint64) (length int32, pointer int64, err error) {
	if sequenceReadHook != nil {
		sequenceReadHook(i)
	}
	if m.idxRemote {
		return m.remoteEntry(i)
	}
	length = int32(binary.LittleEndian.Uint32(m.idx[m.lengthsAt+4*i:]))
	pointer = int64(binary.LittleEndian.Uint64(m.idx[m.pointersAt+8*i:]))
	return length, pointer, nil
}

// pointer reads sequence i's pointer alone: what offset and the check of
// contiguity need.
func (m *megatronFile) pointer(i uint64) (int64, error) {
	if sequenceReadHook != nil {
		sequenceReadHook(i)
	}
	at := m.pointersAt + 8*i
	if !m.idxRemote {
		return int64(binary.LittleEndian.Uint64(m.idx[at:])), nil
	}
	if err := m.idxBlob.Hold(at, 8); err != nil {
		return 0, holdError(m.dataset, err)
	}
	pointer := int64(binary.LittleEndian.Uint64(m.idx[at:]))
	m.idxBlob.Release(at, 8)
	return pointer, nil
}

// extent returns the byte offset in .bin and the token count of sequence i,
// after checking that it lies within the .bin.
func (m *megatronFile) extent(i uint64) (start, tokens uint64, err error) {
	length, pointer, err := m.entry(i)
	if err != nil {
		return 0, 0, err
	}
	size := m.dtype.size()
	switch {
	case length < 0:
		return 0, 0, m.idxError("sequence %d: length %d is negative", i, length)
	case pointer < 0:
		return 0, 0, m.idxError("sequence %d: pointer %d is negative", i, pointer)
	case uint64(pointer)%size != 0:
		return 0, 0, m.idxError("sequence %d: pointer %d is not a multiple of the %d-byte %v token",
			i, pointer, size, m.dtype)
	}
	start, tokens = uint64(pointer), uint64(length)
	if end := start + tokens*size; end > uint64(len(m.bin)) {
		return 0, 0, invalidFile(m.dataset, m.binPath,
			"truncated or does not match %s: sequence %d ends at byte %d, expected at least %d bytes, file has %d",
			m.idxPath, i, end, end, len(m.bin))
	}
	return start, tokens, nil
}

// sequence is extent for reading sequence i: it also checks that the next
// sequence starts where i ends. Megatron writes sequences back to back; with
// that checked on every read, the units tile the bytes Open counted, so
// Tokens and Offset are exact and no token is served twice.
func (m *megatronFile) sequence(i uint64) (start, tokens uint64, err error) {
	start, tokens, err = m.extent(i)
	if err != nil || i+1 >= m.sequences {
		return start, tokens, err
	}
	end := start + tokens*m.dtype.size()
	next, err := m.pointer(i + 1)
	if err != nil {
		return 0, 0, err
	}
	if next != int64(end) {
		return 0, 0, m.idxError("sequence %d ends at byte %d but sequence %d starts at byte %d; want contiguous sequences, as Megatron writes them",
			i, end, i+1, next)
	}
	return start, tokens, nil
}

func (m *megatronFile) idxError(format string, args ...any) error {
	return invalidFile(m.dataset, m.idxPath, format, args...)
}

func (m *megatronFile) units() uint64  { return m.sequences }
func (m *megatronFile) tokens() uint64 { return m.tokenCount }

// offset is sequence u's token position relative to the first sequence: exact
// for contiguous sequences, and clipped to stay monotone-safe otherwise. An
// entry of an object that cannot be fetched gives 0 and is kept for
// offsetError, which fails the open.
func (m *megatronFile) offset(u uint64) uint64 {
	if u >= m.sequences {
		return m.tokenCount
	}
	pointer, err := m.pointer(u)
	if err != nil {
		m.offsetFailed.CompareAndSwap(nil, err)
		return 0
	}
	if pointer < 0 || uint64(pointer) <= m.firstPointer {
		return 0
	}
	return min((uint64(pointer)-m.firstPointer)/m.dtype.size(), m.tokenCount)
}

func (m *megatronFile) unitLen(u uint64) (uint64, error) {
	_, tokens, err := m.sequence(u)
	return tokens, err
}

func (m *megatronFile) read(u, off uint64, dst []int32) error {
	start, tokens, err := m.sequence(u)
	if err != nil {
		return err
	}
	if off > tokens || uint64(len(dst)) > tokens-off {
		return rangeError(m.binPath, u, off, len(dst), tokens)
	}
	size := m.dtype.size()
	from, n := start+off*size, uint64(len(dst))*size
	if err := m.binBlob.Hold(from, n); err != nil {
		return holdError(m.dataset, err)
	}
	defer m.binBlob.Release(from, n)
	src := m.bin[from : from+n]
	if bad := decodeTokens(m.dtype, src, dst); bad >= 0 {
		return invalidFile(m.dataset, m.binPath, "sequence %d, token %d: %v value %s is not a token id in [0, 2^31)",
			u, off+uint64(bad), m.dtype, formatToken(m.dtype, src, bad))
	}
	return nil
}

func (m *megatronFile) files() []File {
	return []File{{Path: m.binPath, Size: int64(len(m.bin))}, {Path: m.idxPath, Size: int64(len(m.idx))}}
}

func (m *megatronFile) close() error {
	err := errors.Join(closeBlob(m.idxBlob), closeBlob(m.binBlob))
	m.idx, m.bin, m.idxBlob, m.binBlob = nil, nil, nil, nil
	return err
}
