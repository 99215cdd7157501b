package stream

import (
	"fmt"
	"math"

	"github.com/dataloaderd/dataloaderd/internal/source"
	"github.com/dataloaderd/dataloaderd/internal/state"
)

// shard is a logical shard: units [lo, lo+n) of a dataset. Its token stream
// is, epoch after epoch, its units in the epoch's permuted order, each
// document framed by the optional BOS and by EOS (flat-file units carry
// their own separators). Lines are consecutive, non-overlapping cuts of
// line-length from this stream, so they depend on the seed and the config,
// never on the world size.
type shard struct {
	ds     *shardedSource
	index  uint32
	lo, n  uint64
	tokens uint64
	key    uint64
	// order is nil unless the shard holds runs of units the source reads
	// best in order (see unitGrouper); then it orders the shard's units.
	order *groupOrder
}

// framing is how a stream wraps documents; fixed per corpus.
type framing struct {
	bos, eos int32
	hasBOS   bool
	epochs   uint64 // 0: unbounded
	line     uint64
	window   uint64
	pad      int32
	seed     uint64
}

// empty reports whether every unit of the shard has no tokens. It stops at
// the first non-empty unit, which is almost always the first.
func (s *shard) empty() (bool, error) {
	for u := s.lo; u < s.lo+s.n; u++ {
		n, err := s.ds.src.UnitLen(u)
		if err != nil || n > 0 {
			return false, err
		}
	}
	return true, nil
}

// unit returns the dataset unit at position pos of epoch's permutation.
func (s *shard) unit(epoch, pos uint64) uint64 {
	if s.order != nil {
		return s.lo + s.order.unit(s.key^mix(epoch+1), epoch, pos)
	}
	return s.lo + permute(s.key^mix(epoch+1), s.n, pos)
}

// frame describes one unit as the stream emits it: head BOS tokens (0 or 1),
// the body, and tail EOS tokens (0 or 1).
type frame struct {
	unit       uint64
	body       uint32
	head, tail uint16
}

func (f frame) len() uint64 { return uint64(f.head) + uint64(f.body) + uint64(f.tail) }

func (s *shard) frame(fr *framing, epoch, pos uint64) (frame, error) {
	return s.frameOf(fr, s.unit(epoch, pos))
}

// frameOf is the frame of dataset unit u.
func (s *shard) frameOf(fr *framing, u uint64) (frame, error) {
	n, err := s.ds.src.UnitLen(u)
	if err != nil {
		return frame{}, err
	}
	if n > math.MaxUint32 {
		return frame{}, fmt.Errorf("%w: dataset %q unit %d has %d tokens, more than 2^32", source.ErrInvalid, s.ds.name, u, n)
	}
	f := frame{unit: u, body: uint32(n)}
	if s.ds.src.Delimited() {
		return f, nil
	}
	if fr.hasBOS {
		f.head = 1
	}
	f.tail = 1
	if n > 0 {
		var last [1]int32
		if err := s.ds.src.Read(u, n-1, last[:]); err != nil {
			return frame{}, err
		}
		if last[0] == fr.eos {
			f.tail = 0 // the document already ends with EOS
		}
	}
	return f, nil
}

// ended reports whether a cursor is past the last epoch.
func (fr *framing) ended(c state.Cursor) bool { return fr.epochs > 0 && c.Epoch >= fr.epochs }

// next moves a cursor to the following unit.
func (s *shard) next(c state.Cursor) state.Cursor {
	c.Pos++
	c.Offset = 0
	if c.Pos == s.n {
		c.Epoch++
		c.Pos = 0
	}
	return c
}

// walk advances c by up to want tokens and returns the new cursor and the
// tokens walked (fewer than want only where the stream ends). When dst is not
// nil, the walked tokens are copied into it. Cursors are kept normal: never at
// the end of a unit, always at the start of the next non-empty one.
//
// fc, when not nil, holds the frames of the units from c's on: frames it has
// are used instead of computed, and frames it lacks are added while it has
// room. The returned index is the new cursor's unit in fc.
//
// pc, when not nil, gets a piece for every run of frame tokens copied
// (copyRun: a blocked document's tokens are written as padding).
func (s *shard) walk(fr *framing, c state.Cursor, want uint64, dst []int32, fc *frameCache, fi int, pc *[]piece) (state.Cursor, uint64, int, error) {
	var done uint64
	empties := uint64(0)
	for !fr.ended(c) {
		f, err := s.cachedFrame(fr, c, fc, fi)
		if err != nil {
			return c, done, fi, err
		}
		if f.len() == 0 {
			// A shard with a non-empty unit meets at most 2(n-1) empty
			// ones in a row (the end of one epoch's order, the start of
			// the next). More: it has nothing to serve (a text shard whose
			// records were all skipped), in any epoch; the walk ends there
			// as at the end of the stream, and the shard serves no line.
			if empties++; empties > 2*s.n {
				return c, done, fi, nil
			}
		} else {
			empties = 0
		}
		rem := f.len() - c.Offset
		if want-done < rem || (want == done && rem > 0) {
			take := want - done
			if dst != nil {
				if err := s.copyRun(fr, f, c.Offset, dst[done:done+take], done, pc, true); err != nil {
					return c, done, fi, err
				}
			}
			c.Offset += take
			return c, want, fi, nil
		}
		if dst != nil {
			if err := s.copyRun(fr, f, c.Offset, dst[done:done+rem], done, pc, false); err != nil {
				return c, done, fi, err
			}
		}
		done += rem
		c = s.next(c)
		fi++
	}
	return c, done, fi, nil
}

// maxWindowFrames bounds the frames a window keeps (16 bytes each), so that a
// shard of very short documents costs at most a few kilobytes per open window.
const maxWindowFrames = 256

// frameCache is the frames of consecutive units of a shard's stream, from the
// first unit of a window on. Computing a frame reads the unit's length and
// last token (a cache miss into the corpus) and permutes its position, so a
// window computes each frame once, when it finds its line starts, and its
// lines reuse them.
type frameCache struct {
	frames []frame
}

// frameGroup is how many frames a window computes at once: their index
// entries and last tokens are fetched from memory together, so that the
// cache misses of random documents overlap.
const frameGroup = 8

// cachedFrame returns the frame of the unit under c, the fi-th of fc.
func (s *shard) cachedFrame(fr *framing, c state.Cursor, fc *frameCache, fi int) (frame, error) {
	if fc != nil && fi < len(fc.frames) {
		return fc.frames[fi], nil
	}
	pf := s.ds.prefetcher
	if fc == nil || fi != len(fc.frames) || fi >= maxWindowFrames || pf == nil {
		f, err := s.frame(fr, c.Epoch, c.Pos)
		if err == nil && fc != nil && fi == len(fc.frames) && fi < maxWindowFrames {
			fc.frames = append(fc.frames, f)
		}
		return f, err
	}
	// The units at c and after it in this epoch, up to a group.
	g := min(uint64(frameGroup), uint64(maxWindowFrames-fi), s.n-c.Pos)
	var units [frameGroup]uint64
	for k := uint64(0); k < g; k++ {
		units[k] = s.unit(c.Epoch, c.Pos+k)
		pf.PrefetchIndex(units[k])
	}
	if !s.ds.src.Delimited() {
		for k := uint64(0); k < g; k++ {
			if n, err := s.ds.src.UnitLen(units[k]); err == nil && n > 0 {
				pf.PrefetchToken(units[k], n-1)
			}
		}
	}
	for k := uint64(0); k < g; k++ {
		f, err := s.frameOf(fr, units[k])
		if err != nil {
			if k == 0 {
				return frame{}, err
			}
			break // the unit's own turn reports it
		}
		fc.frames = append(fc.frames, f)
	}
	return fc.frames[fi], nil
}

// prefetchLine hints the first tokens of every unit window line j reads, so
// that their cache misses overlap before the copy starts.
func (s *shard) prefetchLine(fr *framing, w *window, j uint64) {
	pf := s.ds.prefetcher
	if pf == nil {
		return
	}
	off := w.starts[j].Offset
	var left = fr.line
	for fi := w.first[j]; fi < len(w.fc.frames) && left > 0; fi++ {
		f := w.fc.frames[fi]
		if off < f.len() {
			if body := off; body < uint64(f.head)+uint64(f.body) {
				pf.PrefetchToken(f.unit, max(body, uint64(f.head))-uint64(f.head))
			}
			left -= min(left, f.len()-off)
		}
		off = 0
	}
}

// copyFrame copies the frame's tokens [off, off+len(dst)) into dst.
func (s *shard) copyFrame(fr *framing, f frame, off uint64, dst []int32) error {
	i := 0
	for off < uint64(f.head) && i < len(dst) {
		dst[i] = fr.bos
		i++
		off++
	}
	if i == len(dst) {
		return nil
	}
	bodyOff := off - uint64(f.head)
	if body := uint64(f.body); bodyOff < body {
		n := body - bodyOff
		if n > uint64(len(dst)-i) {
			n = uint64(len(dst) - i)
		}
		if err := s.ds.src.Read(f.unit, bodyOff, dst[i:i+int(n)]); err != nil {
			return err
		}
		i += int(n)
	}
	for ; i < len(dst); i++ {
		dst[i] = fr.eos
	}
	return nil
}

// window is the current line-shuffle window of a shard: the cursors where
// its lines start, computed from lengths alone (no token is read but the
// last of each document), how many lines it has, and the frames of its units
// with the index of each line's first unit among them.
type window struct {
	starts []state.Cursor
	first  []int
	fc     frameCache
	lines  uint64
}

// openWindow computes the window that starts at c, reusing w's memory, and
// asks the source to prepare ahead units of it and of the next window; a
// source in object storage loads the window's units first (windowload.go).
func (s *shard) openWindow(fr *framing, c state.Cursor, w *window, ahead uint64) error {
	ld := s.loadWindow(fr, c)
	s.prefetchAhead(fr, c, ahead)
	w.starts = append(w.starts[:0], c)
	w.first = append(w.first[:0], 0)
	w.fc.frames = w.fc.frames[:0]
	w.lines = 0
	fi := 0
	for w.lines < fr.window && !fr.ended(c) {
		next, n, nfi, err := s.walk(fr, c, fr.line, nil, &w.fc, fi, nil)
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
		w.lines++
		c, fi = next, nfi
		w.starts = append(w.starts, c)
		w.first = append(w.first, fi)
		ld.more(s, fr, c, fi, fr.window-w.lines)
	}
	s.prefetchAhead(fr, c, ahead) // the next window's units
	return nil
}

// fillLine writes window line j into dst, padding past the stream's end,
// and returns the tokens before the padding; pc, when not nil, gets the
// line's pieces.
func (s *shard) fillLine(fr *framing, w *window, j uint64, dst []int32, pc *[]piece) (uint64, error) {
	s.prefetchLine(fr, w, j)
	_, n, _, err := s.walk(fr, w.starts[j], fr.line, dst, &w.fc, w.first[j], pc)
	if err != nil {
		return 0, err
	}
	for i := n; i < uint64(len(dst)); i++ {
		dst[i] = fr.pad
	}
	return n, nil
}

// lineOrder returns which line of the window starting at start is emitted c-th.
func (s *shard) lineOrder(fr *framing, start state.Cursor, lines, c uint64) uint64 {
	if lines <= 1 {
		return c
	}
	return permute(key(s.key, start.Epoch, start.Pos, start.Offset, fr.seed), lines, c)
}

// maxCount bounds the steps, lines and epochs a restored state may claim:
// far beyond any run (2^48 lines of 2 tokens are more than any corpus will
// see), and far enough below 2^64 that no count derived from them wraps.
const maxCount = 1 << 48

// checkRestored checks a shard's restored state against the shard: a
// state file is input from outside, and a cursor past its shard would
// make the producer walk forever (or read past a unit). It opens the
// unit under a cursor with an offset, to check the offset against it.
func (s *shard) checkRestored(fr *framing, st state.Shard) error {
	w := st.Window
	switch {
	case st.Lines > maxCount || w.Epoch > maxCount:
		return fmt.Errorf("lines %d or epoch %d is beyond %d", st.Lines, w.Epoch, uint64(maxCount))
	case st.Base > st.Lines:
		return fmt.Errorf("base %d is past lines %d", st.Base, st.Lines)
	case st.Taken > fr.window:
		return fmt.Errorf("taken %d is more than a window's %d lines", st.Taken, fr.window)
	case fr.epochs > 0 && w.Epoch > fr.epochs:
		return fmt.Errorf("epoch %d is past the run's %d epochs", w.Epoch, fr.epochs)
	case fr.ended(w) && (w.Pos != 0 || w.Offset != 0 || st.Taken != 0):
		return fmt.Errorf("a shard past its last epoch must have its cursor at 0, got position %d offset %d taken %d", w.Pos, w.Offset, st.Taken)
	case fr.ended(w):
		return nil
	case s.n == 0 && (w.Pos != 0 || w.Offset != 0):
		return fmt.Errorf("position %d offset %d in a shard of no units", w.Pos, w.Offset)
	case s.n > 0 && w.Pos >= s.n:
		return fmt.Errorf("position %d is past the shard's %d units", w.Pos, s.n)
	}
	if w.Offset == 0 || s.n == 0 {
		return nil
	}
	f, err := s.frame(fr, w.Epoch, w.Pos)
	if err != nil {
		return err
	}
	if w.Offset >= f.len() {
		return fmt.Errorf("offset %d is past the %d tokens of the unit at position %d", w.Offset, f.len(), w.Pos)
	}
	return nil
}
