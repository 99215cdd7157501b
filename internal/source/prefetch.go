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
func (d *concatSource) PrefetchIndex(u uint64) {
	if u >= d.Units() {
		return
	}
	i, local := d.locate(u)
	if p, ok := d.parts[i].(unitPrefetcher); ok {
		p.prefetchIndex(local)
	}
}

// PrefetchToken implements Prefetcher.
func (d *concatSource) PrefetchToken(u, off uint64) {
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
	if m.idxRemote {
		m.prefetchEntry(u)
		return
	}
	prefetchAt(m.idx, m.lengthsAt+4*u)
	prefetchAt(m.idx, m.pointersAt+8*u)
}

func (m *megatronFile) prefetchToken(u, off uint64) {
	if u >= m.sequences {
		return
	}
	length, pointer, ok := m.cachedEntry(u)
	if !ok || pointer < 0 {
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

// PrefetchOffsets hints that Offset will be asked of units near these
// (the corpus cuts its shards there): a Megatron index in object storage
// fetches the blocks of their entries ahead, together, in as few ranged
// GETs as their blocks allow, rather than one probe's at a time. It never
// blocks.
func (d *concatSource) PrefetchOffsets(units []uint64) {
	d.PrefetchEntries(units) // an offset is read from the unit's entry
}

// ObjectPrefetchUnits is how many units ahead of a rank's reads a dataset
// in object storage asks the node's cache to fetch, shared among the
// rank's shards (each gets at least 4, at most 64): enough to keep the
// fetchers busy through a request's latency. The cache keeps what is
// fetched ahead under half its budget, so a small cache takes less.
const ObjectPrefetchUnits = 1024

// remoteUnits is a fileUnits in object storage that can fetch a unit's
// bytes ahead of its read.
type remoteUnits interface {
	remote() bool
	prefetchUnit(u uint64)
}

// PrefetchDepth is how many units ahead the dataset wants Prefetch to be
// given: ObjectPrefetchUnits when a file is in object storage, else 0 (the
// mapped files need no such hint).
func (d *concatSource) PrefetchDepth() uint64 {
	for _, p := range d.parts {
		if r, ok := p.(remoteUnits); ok && r.remote() {
			return ObjectPrefetchUnits
		}
	}
	return 0
}

// Prefetch fetches the bytes of units in object storage into the node's
// cache ahead of their reads. It never blocks; it returns how many units
// it hinted. A Megatron file's units whose entries are cached are asked
// for together, in as few ranged GETs as their blocks allow
// (megatronload.go).
func (d *concatSource) Prefetch(units []uint64) int {
	n := 0
	for _, u := range units {
		if u >= d.Units() {
			continue
		}
		i, local := d.locate(u)
		r, ok := d.parts[i].(remoteUnits)
		if !ok || !r.remote() {
			continue
		}
		n++
		if _, ok := r.(*megatronFile); !ok {
			r.prefetchUnit(local)
		}
	}
	sc := getScratch()
	defer putScratch(sc)
	d.eachMegatron(units, sc, func(m *megatronFile, seqs []uint64) {
		if m.remote() {
			m.prefetchUnits(seqs, sc)
		}
	})
	return n
}

func (m *megatronFile) remote() bool { return m.binBlob.Remote() }

func (m *megatronFile) prefetchUnit(u uint64) {
	if u >= m.sequences {
		return
	}
	if length, pointer, ok := m.cachedEntry(u); ok && pointer >= 0 && length > 0 {
		m.binBlob.Prefetch(uint64(pointer), uint64(length)*m.dtype.size())
	}
}

func (f *tokenFile) remote() bool { return f.blob.Remote() }

// prefetchUnit fetches block b's nominal span and a little past it, where
// its end snaps to the next separator.
func (f *tokenFile) prefetchUnit(b uint64) {
	size := f.dtype.size()
	f.blob.Prefetch(f.dataAt()+b*f.blocks*size, (f.blocks+f.blocks/8+1)*size)
}

func (f *arrowFile) remote() bool { return f.blob.Remote() }

// prefetchUnit fetches where unit u's tokens lie: the whole record batch of
// a batch-per-document file; for the list layout, its offsets and the place
// its values would have if the batch's rows were of equal length (a hint:
// its read fetches what it misses).
func (f *arrowFile) prefetchUnit(u uint64) {
	if u >= f.units() {
		return
	}
	size := f.dtype.size()
	if f.perBatch {
		b := f.batches[u]
		f.blob.Prefetch(b.valuesAt, b.values*size)
		return
	}
	b, r := f.row(u)
	batch := f.batches[b]
	f.blob.Prefetch(batch.offsetsAt+r*f.offsetWidth, 2*f.offsetWidth)
	rows := f.rowStart[b+1] - f.rowStart[b]
	if rows > 0 && batch.values > 0 {
		at := batch.valuesAt + batch.values*r/rows*size
		f.blob.Prefetch(at, max(batch.values/rows, 1)*size)
	}
}
