package tokenize

import "hash/maphash"

// Limits of one Encoder's piece cache. A full cache is emptied and starts again: pieces
// repeat with a heavy head (Zipf), so the common ones come back within a few kilobytes.
const (
	cacheSlots    = 1 << 17 // open-addressing slots, a power of two
	cacheMaxPiece = 64      // longer pieces are not cached
	cacheMaxBytes = 1 << 21 // bytes of keys kept before the cache is emptied
)

// cacheSlot is one entry: where its key and its tokens sit in the arenas. A zero tlen marks
// an empty slot (every cached piece has at least one token).
type cacheSlot struct {
	hash uint64
	koff uint32
	toff uint32
	klen uint16
	tlen uint16
}

// pieceCache maps a piece's bytes to its tokens. It belongs to one Encoder, so it needs no
// lock, and it allocates nothing once its arenas have grown.
type pieceCache struct {
	seed  maphash.Seed
	slots []cacheSlot
	keys  []byte
	toks  []int32
	used  int
}

func newPieceCache() *pieceCache {
	return &pieceCache{
		seed:  maphash.MakeSeed(),
		slots: make([]cacheSlot, cacheSlots),
	}
}

// get returns the cached tokens of piece, or nil, and the piece's hash for put.
func (c *pieceCache) get(piece []byte) ([]int32, uint64) {
	h := maphash.Bytes(c.seed, piece)
	mask := uint64(len(c.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &c.slots[i]
		if s.tlen == 0 {
			return nil, h
		}
		if s.hash == h && int(s.klen) == len(piece) && string(c.keys[s.koff:s.koff+uint32(s.klen)]) == string(piece) {
			return c.toks[s.toff : s.toff+uint32(s.tlen)], h
		}
	}
}

// put stores the tokens of piece (hash h from get); it may first empty the cache.
func (c *pieceCache) put(piece []byte, h uint64, toks []int32) {
	if len(piece) > cacheMaxPiece || len(toks) == 0 {
		return
	}
	if c.used >= len(c.slots)*5/8 || len(c.keys)+len(piece) > cacheMaxBytes {
		clear(c.slots)
		c.keys, c.toks, c.used = c.keys[:0], c.toks[:0], 0
	}
	mask := uint64(len(c.slots) - 1)
	i := h & mask
	for c.slots[i].tlen != 0 {
		i = (i + 1) & mask
	}
	c.slots[i] = cacheSlot{
		hash: h,
		koff: uint32(len(c.keys)),
		toff: uint32(len(c.toks)),
		klen: uint16(len(piece)),
		tlen: uint16(len(toks)),
	}
	c.keys = append(c.keys, piece...)
	c.toks = append(c.toks, toks...)
	c.used++
}
