// A Megatron index in object storage, read by range: an entry's bytes are
// held in the node's cache while they are read, so that opening reads the
// header and the entries that cutting shards needs, and a rank's reads the
// entries of the sequences it reads: never the whole index.

package source

import "encoding/binary"

// remoteEntry reads sequence i's length and pointer from an index in
// object storage, holding their bytes (fetched when absent) for the read.
func (m *megatronFile) remoteEntry(i uint64) (length int32, pointer int64, err error) {
	at := m.lengthsAt + 4*i
	if err := m.idxBlob.Hold(at, 4); err != nil {
		return 0, 0, holdError(m.dataset, err)
	}
	length = int32(binary.LittleEndian.Uint32(m.idx[at:]))
	m.idxBlob.Release(at, 4)
	at = m.pointersAt + 8*i
	if err := m.idxBlob.Hold(at, 8); err != nil {
		return 0, 0, holdError(m.dataset, err)
	}
	pointer = int64(binary.LittleEndian.Uint64(m.idx[at:]))
	m.idxBlob.Release(at, 8)
	return length, pointer, nil
}

// cachedEntry is entry for a hint, which must not block: an object's
// entry only when its bytes are in the cache; else it asks the cache to
// fetch them ahead, and ok is false.
func (m *megatronFile) cachedEntry(i uint64) (length int32, pointer int64, ok bool) {
	if !m.idxRemote {
		length, pointer, _ = m.entry(i)
		return length, pointer, true
	}
	lat, pat := m.lengthsAt+4*i, m.pointersAt+8*i
	if !m.idxBlob.HoldCached(lat, 4) {
		m.prefetchEntry(i)
		return 0, 0, false
	}
	length = int32(binary.LittleEndian.Uint32(m.idx[lat:]))
	m.idxBlob.Release(lat, 4)
	if !m.idxBlob.HoldCached(pat, 8) {
		m.prefetchEntry(i)
		return 0, 0, false
	}
	pointer = int64(binary.LittleEndian.Uint64(m.idx[pat:]))
	m.idxBlob.Release(pat, 8)
	return length, pointer, true
}

// prefetchEntry asks the cache to fetch sequence i's entry (and that of
// i+1, which its read checks) ahead of its read. It never blocks.
func (m *megatronFile) prefetchEntry(i uint64) {
	n := min(2, m.sequences-i)
	m.idxBlob.Prefetch(m.lengthsAt+4*i, 4*n)
	m.idxBlob.Prefetch(m.pointersAt+8*i, 8*n)
}

// offsetError is the first failure to fetch an entry for offset().
func (m *megatronFile) offsetError() error {
	err, _ := m.offsetFailed.Load().(error)
	return err
}
