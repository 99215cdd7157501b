// Loading a window's units of a Megatron dataset whose index is in object
// storage: their index entries, then their tokens, brought into the
// node's cache in a few ranged GETs run at once, before a shard's walk
// reads them one by one (which would wait a round trip for each block it
// meets).

package source

import (
	"cmp"
	"math"
	"slices"
	"sync"

	"github.com/dataloaderd/dataloaderd/internal/files"
)

const (
	// loadGets is how many ranged GETs one load runs at once.
	loadGets = 16
	// loadPieceBytes bounds one GET of a load, so that a long span is
	// fetched in pieces at once rather than in one long GET.
	loadPieceBytes = 4 << 20
	// joinGapBlocks: two spans at most this many blocks apart are fetched
	// as one, the gap with them: a GET saved for a few blocks more.
	joinGapBlocks = 2
)

// byteSpan is bytes [off, off+n) of a file.
type byteSpan struct{ off, n uint64 }

// IndexRemote reports whether a part's index entries are read from object
// storage (a Megatron .idx there), which LoadUnits and PrefetchEntries
// then fetch together.
func (d *concatSource) IndexRemote() bool {
	for _, p := range d.parts {
		if m, ok := p.(*megatronFile); ok && m.idxRemote {
			return true
		}
	}
	return false
}

// LoadUnits brings into the node's cache the index entries of units (in
// the order a window's walk meets them), then the tokens of those a window
// of window tokens walks (up to window tokens past the first unit's, the
// last token of each, and one unit more), each in a few ranged GETs at
// once, and returns once they are in. A hint: what fails to be fetched is
// left for the reads to fetch again and report.
func (d *concatSource) LoadUnits(units []uint64, window uint64) {
	sc := getScratch()
	defer putScratch(sc)
	d.eachMegatron(units, sc, func(m *megatronFile, seqs []uint64) {
		if m.idxRemote {
			sc.spans = m.entrySpans(sc.spans[:0], seqs)
			fetchSpans(m.idxBlob, sc.spans, true)
		}
	})
	d.eachMegatron(units[:d.walked(units, window)], sc, func(m *megatronFile, seqs []uint64) {
		if m.idxRemote && m.binBlob.Remote() {
			sc.spans = m.tokenSpans(sc.spans[:0], seqs, window)
			fetchSpans(m.binBlob, sc.spans, true)
		}
	})
}

// walked is how many of units a window of window tokens walks at most:
// documents are framed by at least their tokens, so it ends by the unit
// whose tokens, with those before it but the first's, reach window; one
// more, where the walk's cursor stops. A length not in the cache counts
// as none (a unit more).
func (d *concatSource) walked(units []uint64, window uint64) int {
	var tokens uint64
	for k, u := range units {
		if k > 0 && tokens >= window {
			return min(k+1, len(units))
		}
		if u >= d.Units() || k == 0 {
			continue
		}
		i, local := d.locate(u)
		if m, ok := d.parts[i].(*megatronFile); ok && m.idxRemote {
			if length, _, ok := m.cachedEntry(local); ok && length > 0 {
				tokens += uint64(length)
			}
		}
	}
	return len(units)
}

// PrefetchEntries asks the node's cache to fetch the index entries of
// units ahead, in as few ranged GETs as their blocks allow. It never
// blocks.
func (d *concatSource) PrefetchEntries(units []uint64) {
	sc := getScratch()
	defer putScratch(sc)
	d.eachMegatron(units, sc, func(m *megatronFile, seqs []uint64) {
		if m.idxRemote {
			sc.spans = m.entrySpans(sc.spans[:0], seqs)
			fetchSpans(m.idxBlob, sc.spans, false)
		}
	})
}

// prefetchUnits asks the node's cache to fetch sequences seqs' (sorted)
// tokens ahead, those whose entries are cached (the others' entries are
// asked for), in as few ranged GETs as their blocks allow, building
// their spans in sc. It never blocks.
func (m *megatronFile) prefetchUnits(seqs []uint64, sc *hintScratch) {
	sc.spans = m.tokenSpans(sc.spans[:0], seqs, math.MaxUint64)
	fetchSpans(m.binBlob, sc.spans, false)
}

// entrySpans appends to spans the bytes of sequences seqs' entries
// (sorted): each length, and each pointer with the next one, which a read
// checks.
func (m *megatronFile) entrySpans(spans []byteSpan, seqs []uint64) []byteSpan {
	for _, i := range seqs {
		spans = append(spans, byteSpan{m.lengthsAt + 4*i, 4})
	}
	for _, i := range seqs {
		spans = append(spans, byteSpan{m.pointersAt + 8*i, 8 * min(2, m.sequences-i)})
	}
	return spans
}

// tokenSpans appends to spans the bytes of sequences seqs' tokens a
// window of window tokens reads: the first window and the last, for the
// sequences whose entries are in the cache, in order.
func (m *megatronFile) tokenSpans(spans []byteSpan, seqs []uint64, window uint64) []byteSpan {
	size := m.dtype.size()
	for _, i := range seqs {
		length, pointer, ok := m.cachedEntry(i)
		if !ok || length <= 0 || pointer < 0 || uint64(pointer)+uint64(length)*size > uint64(len(m.bin)) {
			continue // the read checks it
		}
		at, n := uint64(pointer), uint64(length)
		spans = append(spans, byteSpan{at, min(n, window) * size})
		if n > window {
			spans = append(spans, byteSpan{at + (n-1)*size, size})
		}
	}
	slices.SortFunc(spans, func(a, b byteSpan) int { return cmp.Compare(a.off, b.off) })
	return spans
}

// joinSpans joins spans (sorted by offset) whose blocks of block bytes
// touch or lie at most joinGapBlocks apart, in place.
func joinSpans(spans []byteSpan, block uint64) []byteSpan {
	if block == 0 {
		return spans
	}
	out := spans[:0]
	for _, s := range spans {
		if s.n == 0 {
			continue
		}
		if k := len(out) - 1; k >= 0 {
			last := &out[k]
			end := last.off + last.n
			if s.off/block <= (end-1)/block+1+joinGapBlocks {
				last.n = max(end, s.off+s.n) - last.off
				continue
			}
		}
		out = append(out, s)
	}
	return out
}

// fetchSpans brings spans (sorted) of an object into the cache, joined
// and cut in pieces, loadGets ranged GETs at a time, and waits for them:
// up to a quarter of the cache; the rest, and all of them when wait is
// false, are asked for ahead. Errors are left to the reads.
func fetchSpans(b *files.Blob, spans []byteSpan, wait bool) {
	if !b.Remote() || len(spans) == 0 {
		return
	}
	block := uint64(b.BlockSize())
	if !wait {
		// Hints go whole: the cache fetches their runs of absent blocks
		// in GETs as large as it sees fit, and a hint that continues the
		// one before is gathered with the next (objstore's gather.go).
		for _, s := range joinSpans(spans, block) {
			b.Prefetch(s.off, s.n)
		}
		return
	}
	limit := uint64(b.HoldLimit()) / 2
	piece := max(block, min(loadPieceBytes, limit/loadGets/block*block))
	var pieces []byteSpan
	for _, s := range joinSpans(spans, block) {
		for s.n > 0 {
			n := min(s.n, piece)
			pieces = append(pieces, byteSpan{s.off, n})
			s.off, s.n = s.off+n, s.n-n
		}
	}
	var wg sync.WaitGroup
	gets := make(chan struct{}, loadGets)
	var held uint64
	for _, p := range pieces {
		if held += p.n; held > limit {
			b.Prefetch(p.off, p.n)
			continue
		}
		gets <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-gets; wg.Done() }()
			if b.Hold(p.off, p.n) == nil {
				b.Release(p.off, p.n)
			}
		}()
	}
	wg.Wait()
}
