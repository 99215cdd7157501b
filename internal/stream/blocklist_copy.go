package stream

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"sync"
)

// A blocked document keeps its place in its shard's stream: the frames,
// lines and windows are those of the stream without a blocklist, so no
// cursor moves when one is added at a resume. Its tokens are written as
// the padding token, as their own pieces (piece.blocked), which the
// metadata writes as padding (document_ids -1, loss_mask 0) and explain
// marks. A dataset with no blocklist costs a nil check per frame copied.

// documentHasher is a text source that hashes its units' documents and
// says where each lies in the unit's tokens (text.Tokens).
type documentHasher interface {
	DocumentHashes(u uint64) ([][sha256.Size]byte, error)
	DocumentSpans(u uint64) ([][2]uint64, error)
}

// textBlocks caches, for the text units met, the spans of their blocked
// documents (nil: none): finding them reads the unit's text and hashes
// each document. The lines of a window read a unit several times; the
// cache is dropped whole when full, so it stays within maxTextBlocks
// units.
type textBlocks struct {
	mu    sync.Mutex
	units map[uint64][][2]uint64
}

const maxTextBlocks = 4096

func newTextBlocks() *textBlocks { return &textBlocks{units: map[uint64][][2]uint64{}} }

// spans returns the blocked spans of text frame f's tokens, in order; nil
// when none of its tokens is blocked.
func (b *blockedUnits) spans(ds *shardedSource, f frame) ([][2]uint64, error) {
	if b.texts == nil {
		return nil, nil
	}
	tb := b.texts
	tb.mu.Lock()
	sp, ok := tb.units[f.unit]
	tb.mu.Unlock()
	if ok {
		return sp, nil
	}
	sp, err := b.textSpans(ds, f.unit)
	if err != nil {
		return nil, err
	}
	tb.mu.Lock()
	if len(tb.units) >= maxTextBlocks {
		clear(tb.units)
	}
	tb.units[f.unit] = sp
	tb.mu.Unlock()
	return sp, nil
}

// textSpans finds the blocked documents of text unit u: by their hashes,
// and by their places where the blocklist names some of the unit's.
func (b *blockedUnits) textSpans(ds *shardedSource, u uint64) ([][2]uint64, error) {
	h, ok := ds.src.(documentHasher)
	if !ok {
		return nil, fmt.Errorf("dataset %q: its source cannot hash its documents for the blocklist", ds.name)
	}
	sums, err := h.DocumentHashes(u)
	if err != nil {
		return nil, fmt.Errorf("dataset %q unit %d: blocklist: %w", ds.name, u, err)
	}
	blocked := map[int]bool{}
	for i, s := range sums {
		if _, ok := b.hashes[s]; ok {
			blocked[i] = true
		}
	}
	if recs := b.records[u]; len(recs) > 0 {
		p, ok := ds.src.(recordPlacer)
		if !ok {
			return nil, fmt.Errorf("dataset %q unit %d: blocklist: its records cannot be placed", ds.name, u)
		}
		places, ok, err := p.Records(u)
		if err != nil || !ok || len(places) != len(sums) {
			return nil, fmt.Errorf("dataset %q unit %d: blocklist: its %d documents placed as %d (%v)", ds.name, u, len(sums), len(places), err)
		}
		for i, pl := range places {
			if slices.Contains(recs, pl) {
				blocked[i] = true
			}
		}
	}
	if len(blocked) == 0 {
		return nil, nil
	}
	all, err := h.DocumentSpans(u)
	if err != nil || len(all) != len(sums) {
		return nil, fmt.Errorf("dataset %q unit %d: blocklist: the unit's %d documents tokenize as %d (%v)", ds.name, u, len(sums), len(all), err)
	}
	out := make([][2]uint64, 0, len(blocked))
	for i := range all {
		if !blocked[i] {
			continue
		}
		if n := len(out); n > 0 && out[n-1][1] == all[i][0] {
			out[n-1][1] = all[i][1] // adjacent: one span
			continue
		}
		out = append(out, all[i])
	}
	return out, nil
}

// copyRun copies frame f's tokens [off, off+len(dst)) into dst, which
// starts at column at of its line, and adds its piece to pc when pc is
// not nil (an empty one only with keepEmpty). The spans of a blocked
// document are written as padding, each its own piece.
func (s *shard) copyRun(fr *framing, f frame, off uint64, dst []int32, at uint64, pc *[]piece, keepEmpty bool) error {
	if b := s.ds.blocked; b != nil && len(dst) > 0 {
		if _, ok := b.units[f.unit]; ok { // a Megatron or Arrow document
			whole := [1][2]uint64{{0, f.len()}}
			return s.copyBlocked(fr, f, off, dst, at, pc, whole[:])
		}
		spans, err := b.spans(s.ds, f)
		if err != nil {
			return err
		}
		if spans != nil {
			return s.copyBlocked(fr, f, off, dst, at, pc, spans)
		}
	}
	if err := s.copyFrame(fr, f, off, dst); err != nil {
		return err
	}
	if pc != nil && (keepEmpty || len(dst) > 0) {
		*pc = append(*pc, piece{at: at, n: uint64(len(dst)), off: off, f: f})
	}
	return nil
}

// copyBlocked is copyRun for a frame with blocked spans: the run is cut
// at their edges, the blocked parts padded and never read.
func (s *shard) copyBlocked(fr *framing, f frame, off uint64, dst []int32, at uint64, pc *[]piece, spans [][2]uint64) error {
	end := off + uint64(len(dst))
	for pos := off; pos < end; {
		blocked, next := false, end
		for _, sp := range spans {
			if pos >= sp[0] && pos < sp[1] {
				blocked, next = true, min(sp[1], end)
				break
			}
			if sp[0] > pos {
				next = min(sp[0], end)
				break
			}
		}
		part := dst[pos-off : next-off]
		if blocked {
			fill(part, fr.pad)
		} else if err := s.copyFrame(fr, f, pos, part); err != nil {
			return err
		}
		if pc != nil {
			*pc = append(*pc, piece{at: at + pos - off, n: next - pos, off: pos, f: f, blocked: blocked})
		}
		pos = next
	}
	return nil
}
