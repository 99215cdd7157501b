package tokenize

import "math"

// noMerge is the packed rank of a pair that has no merge.
const noMerge = math.MaxUint64

// shortPiece is the longest piece, in bytes, merged by the quadratic scan; longer pieces go
// through the heap, whose cost grows as n log n.
const shortPiece = 96

// pairKey packs two token ids into a merge-table key.
func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// lookup returns the merge of the adjacent tokens a and b packed as rank<<32 | result id,
// or noMerge. Lower packed values merge first; equal ranks always yield the same token.
func (t *Tokenizer) lookup(a, b int32) uint64 {
	if m, ok := t.merges[pairKey(a, b)]; ok {
		return m
	}
	return noMerge
}

// fillBytePairs caches the merges of all pairs of single bytes, the first lookups of every
// piece, in a flat table: it saves a hash lookup per byte of text.
func (t *Tokenizer) fillBytePairs() {
	t.bytePairs = make([]uint64, 1<<16)
	for a := range 256 {
		for b := range 256 {
			t.bytePairs[a<<8|b] = t.lookup(t.byteTok[a], t.byteTok[b])
		}
	}
}

// bpe appends the tokens of one piece (len >= 2) to dst. It merges, again and again, the
// adjacent pair with the lowest rank, the leftmost one on ties: the rule of both tiktoken
// (rank = rank of the merged bytes) and Hugging Face BPE (rank = index in the merges list).
func (t *Tokenizer) bpe(dst []int32, piece []byte, s *scratch) []int32 {
	if len(piece) > shortPiece {
		return t.bpeHeap(dst, piece, s)
	}
	n := len(piece)
	ids := s.ids[:n]
	ranks := s.ranks[:n]
	for i, b := range piece {
		ids[i] = t.byteTok[b]
	}
	for i := 0; i < n-1; i++ {
		ranks[i] = t.bytePairs[int(piece[i])<<8|int(piece[i+1])]
	}
	ranks[n-1] = noMerge
	for n > 1 {
		best, at := uint64(noMerge), -1
		for i, r := range ranks[:n-1] {
			if r < best {
				best, at = r, i
			}
		}
		if at < 0 {
			break
		}
		ids[at] = int32(uint32(best))
		copy(ids[at+1:n], ids[at+2:n])
		copy(ranks[at+1:n], ranks[at+2:n])
		n--
		ranks[n-1] = noMerge
		if at < n-1 {
			ranks[at] = t.lookup(ids[at], ids[at+1])
		} else {
			ranks[at] = noMerge
		}
		if at > 0 {
			ranks[at-1] = t.lookup(ids[at-1], ids[at])
		}
	}
	return append(dst, ids[:n]...)
}

// bpeHeap is bpe for long pieces: parts form a linked list indexed by their first byte, and
// candidate merges sit in a binary min-heap keyed by (rank, position). Entries made stale by
// an earlier merge are recognised when popped and dropped.
func (t *Tokenizer) bpeHeap(dst []int32, piece []byte, s *scratch) []int32 {
	n := len(piece)
	s.grow(n)
	ids, next, prev := s.ids[:n], s.next[:n], s.prev[:n]
	h := s.heap[:0]
	for i, b := range piece {
		ids[i] = t.byteTok[b]
		next[i] = int32(i + 1)
		prev[i] = int32(i - 1)
	}
	next[n-1] = -1
	push := func(rank uint32, pos int32) {
		h = append(h, uint64(rank)<<32|uint64(uint32(pos)))
		for i := len(h) - 1; i > 0; {
			p := (i - 1) / 2
			if h[p] <= h[i] {
				break
			}
			h[p], h[i] = h[i], h[p]
			i = p
		}
	}
	pop := func() uint64 {
		top := h[0]
		last := len(h) - 1
		h[0] = h[last]
		h = h[:last]
		for i := 0; ; {
			l, m := 2*i+1, i
			if l < len(h) && h[l] < h[m] {
				m = l
			}
			if l+1 < len(h) && h[l+1] < h[m] {
				m = l + 1
			}
			if m == i {
				break
			}
			h[m], h[i] = h[i], h[m]
			i = m
		}
		return top
	}
	for i := 0; i < n-1; i++ {
		if m := t.bytePairs[int(piece[i])<<8|int(piece[i+1])]; m != noMerge {
			push(uint32(m>>32), int32(i))
		}
	}
	for len(h) > 0 {
		top := pop()
		rank, pos := uint32(top>>32), int32(uint32(top))
		if ids[pos] < 0 || next[pos] < 0 {
			continue
		}
		r := next[pos]
		m := t.lookup(ids[pos], ids[r])
		if m == noMerge || uint32(m>>32) != rank {
			continue
		}
		ids[pos] = int32(uint32(m))
		ids[r] = -1
		next[pos] = next[r]
		if next[r] >= 0 {
			prev[next[r]] = pos
			if m := t.lookup(ids[pos], ids[next[pos]]); m != noMerge {
				push(uint32(m>>32), pos)
			}
		}
		if p := prev[pos]; p >= 0 {
			if m := t.lookup(ids[p], ids[pos]); m != noMerge {
				push(uint32(m>>32), p)
			}
		}
	}
	s.heap = h
	for i := int32(0); i >= 0; i = next[i] {
		dst = append(dst, ids[i])
	}
	return dst
}
