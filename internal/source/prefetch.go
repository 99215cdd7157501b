package source

import "unsafe"

// Prefetcher is implemented by sources whose units live in mapped files. A
// reader that knows which units it reads next asks for them ahead, a group
// at a time, so that the cache misses of random documents overlap instead of
// stalling one after another: first the index entries of the group, then
// (once those are cached) the tokens. Both are hints: they never fail and
// change nothing but timing.
type Prefetcher interface {
	// PrefetchIndex hints that unit u's index entries will be read.
	PrefetchIndex(u uint64)
	// PrefetchToken hints that token off of unit u will be read; it reads
	// u's index entries.
	PrefetchToken(u, off uint64)
}

// unitPrefetcher is a fileUnits with prefetch hints.
type unitPrefetcher interface {
	prefetchIndex(u uint64)
	prefetchToken(u, off uint64)
}

// PrefetchIndex implements Prefetcher.
func (d *dataset) PrefetchIndex(u uint64) {
	if u >= d.Units() {
		return
	}
	i, local := d.locate(u)
	if p, ok := d.parts[i].(unitPrefetcher); ok {
		p.prefetchIndex(local)
	}
}

// PrefetchToken implements Prefetcher.
func (d *dataset) PrefetchToken(u, off uint64) {
	if u >= d.Units() {
		return
	}
	i, local := d.locate(u)
	if p, ok := d.parts[i].(unitPrefetcher); ok {
		p.prefetchToken(local, off)
	}
}

// prefetchAt hints the cache line of b[off], when off is inside b.
func prefetchAt(b []byte, off uint64) {
	if off < uint64(len(b)) {
		prefetch(uintptr(unsafe.Pointer(&b[off])))
	}
}

func (m *megatronFile) prefetchIndex(u uint64) {
	if u >= m.sequences {
		return
	}
	prefetchAt(m.idx, m.lengthsAt+4*u)
	prefetchAt(m.idx, m.pointersAt+8*u)
}

func (m *megatronFile) prefetchToken(u, off uint64) {
	if u >= m.sequences {
		return
	}
	length, pointer := m.entry(u)
	if pointer < 0 {
		return
	}
	if m.binBlob.Remote() {
		// The sequence's bytes, fetched ahead into the node's cache.
		if length > 0 {
			m.binBlob.Prefetch(uint64(pointer), uint64(length)*m.dtype.size())
		}
		return
	}
	prefetchAt(m.bin, uint64(pointer)+off*m.dtype.size())
}
