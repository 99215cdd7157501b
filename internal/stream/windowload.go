package stream

import (
	"sync"

	"github.com/dataloaderd/dataloaderd/internal/state"
)

// A window that opens over a source whose index is in object storage (a
// Megatron .idx read by range) walks its units one by one, reading each
// one's length and last token: one round trip for each block of the index
// or the tokens that the walk meets, thousands for a window of short
// documents. Before the walk, the source loads the units the window is
// expected to walk: their index entries, then their tokens, each in a few
// ranged GETs at once (source LoadUnits); the walk then finds them in the
// node's cache. Only the cache's contents change: the window, its lines
// and their order are the same. Beside it, prefetchAhead: the units a shard
// reads next, asked for ahead of its windows.

// maxLoadUnits bounds the units one load asks for (8 bytes each); a
// window that walks past them loads the next ones as it goes.
const maxLoadUnits = 1 << 14

// windowLoad is what an opening window has had its source load: the units
// from the window's start on, in the order its walk meets them.
type windowLoad struct {
	loader unitLoader
	// units is how many units from the window's start were loaded.
	units uint64
	// perLine is how many units a line is expected to walk.
	perLine uint64
	// tokens is the window's tokens: what a unit's load need cover.
	tokens uint64
}

// loadWindow has the source load the units a window opening at c is
// expected to walk (from the shard's mean unit length, a quarter more and
// two over). Nil when the source has nothing to load.
func (s *shard) loadWindow(fr *framing, c state.Cursor) *windowLoad {
	l := s.ds.loader
	if l == nil || fr.ended(c) || s.n == 0 || s.tokens == 0 {
		return nil
	}
	frame := float64(s.tokens)/float64(s.n) + 1 // a document's EOS
	if fr.hasBOS {
		frame++
	}
	ld := &windowLoad{loader: l, perLine: uint64(float64(fr.line)/frame) + 1, tokens: fr.window * fr.line}
	ld.units = s.loadFrom(fr, c, ld.want(fr.window), ld)
	return ld
}

// want is how many units to load for lines more lines.
func (ld *windowLoad) want(lines uint64) uint64 {
	return min(lines*ld.perLine+lines*ld.perLine/4+2, maxLoadUnits)
}

// more loads the units of the lines left when the walk, walked units past
// the window's start at cursor c, is expected to pass those loaded within
// its next line.
func (ld *windowLoad) more(s *shard, fr *framing, c state.Cursor, walked int, lines uint64) {
	if ld == nil || lines == 0 || fr.ended(c) || uint64(walked)+ld.perLine <= ld.units {
		return
	}
	ld.units = uint64(walked) + s.loadFrom(fr, c, ld.want(lines), ld)
}

// loadFrom has the source load the n units the shard's stream meets from
// cursor c on (fewer at the stream's end) and returns how many.
func (s *shard) loadFrom(fr *framing, c state.Cursor, n uint64, ld *windowLoad) uint64 {
	units := make([]uint64, 0, n)
	c.Offset = 0
	for uint64(len(units)) < n && !fr.ended(c) {
		units = append(units, s.unit(c.Epoch, c.Pos))
		c = s.next(c)
	}
	ld.loader.LoadUnits(units, ld.tokens)
	return uint64(len(units))
}

// maxPrefetchAhead bounds the units one prefetchAhead hints.
const maxPrefetchAhead = 64

// aheadUnits are the arrays prefetchAhead lists units in, reused: made
// for each call (they escape, passed to the source), they were garbage
// made thousands of times a second.
var aheadUnits = sync.Pool{New: func() any { return new([maxPrefetchAhead]uint64) }}

// prefetchAhead asks the source to prepare the units at and after cursor c
// (at most n of them, up to maxPrefetchAhead, in c's epoch): the units a
// shard reads next.
func (s *shard) prefetchAhead(fr *framing, c state.Cursor, n uint64) {
	p := s.ds.units
	if p == nil || fr.ended(c) {
		return
	}
	units := aheadUnits.Get().(*[maxPrefetchAhead]uint64)
	defer aheadUnits.Put(units)
	k := uint64(0)
	for ; k < min(n, uint64(len(units))) && c.Pos+k < s.n; k++ {
		units[k] = s.unit(c.Epoch, c.Pos+k)
	}
	if s.ds.loader != nil {
		s.ds.loader.PrefetchEntries(units[:k])
	}
	p.Prefetch(units[:k])
}
