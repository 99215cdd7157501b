package objstore

import (
	"maps"
	"slices"
)

// chunkBlocks is how many blocks one piece of an object's block table
// describes: 64 blocks of 16 bytes, 1 KiB.
const chunkBlocks = 64

// blockChunk describes blocks [64k, 64k+64) of an object.
type blockChunk [chunkBlocks]block

// blockTable is the bookkeeping of an object's blocks. It is made in
// chunks of 64 blocks when a block of the chunk is first fetched, held or
// queued, and a chunk is dropped when all its blocks are idle again
// (absent, unheld, in no LRU): what an object costs follows the blocks in
// use, which the cache's budget bounds, not its size. A block costs 16
// bytes, a chunk 1 KiB and its entry in the map; an object nobody reads,
// even one of 5 TiB, costs none. Guarded by the store's mutex.
type blockTable struct {
	chunks map[int]*blockChunk
	// recent are the two chunks looked up last, the latest first, so
	// that most lookups skip the map (half the cost of a warm read's
	// bookkeeping before): a read's Release finds the chunk its Hold
	// found, reads in order stay in one chunk for 64 blocks, and a
	// Megatron index's reads alternate between its sizes and pointers.
	recent [2]recentChunk
	// seen holds chunks looked up before, chunk k at k%seenChunks, so
	// that reads at random in up to seenChunks chunks (128 MiB of 64 KiB
	// blocks) skip the map too: its lookup was a quarter of a warm read's
	// bookkeeping (docs/benchmarks.md, "Warm reads from the cache"). Made
	// once the table has more chunks than recent holds (512 bytes), and
	// dropped with the last chunk.
	seen *[seenChunks]recentChunk
}

// seenChunks is the size of blockTable.seen, a power of two.
const seenChunks = 32

// recentChunk is chunk key of a blockTable; c is nil when unused.
type recentChunk struct {
	c   *blockChunk
	key int
}

// chunk is chunk k, or nil when it is not made.
func (t *blockTable) chunk(k int) *blockChunk {
	if r := t.recent[0]; r.c != nil && r.key == k {
		return r.c
	}
	if r := t.recent[1]; r.c != nil && r.key == k {
		t.recent[0], t.recent[1] = r, t.recent[0]
		return r.c
	}
	if t.seen != nil {
		if r := t.seen[k&(seenChunks-1)]; r.c != nil && r.key == k {
			t.recent[0], t.recent[1] = r, t.recent[0]
			return r.c
		}
	}
	c := t.chunks[k]
	if c != nil {
		t.remember(c, k)
	}
	return c
}

// remember makes chunk c (key k) the latest looked up, and keeps it in seen.
func (t *blockTable) remember(c *blockChunk, k int) {
	t.recent[0], t.recent[1] = recentChunk{c, k}, t.recent[0]
	if t.seen == nil && len(t.chunks) > len(t.recent) {
		t.seen = new([seenChunks]recentChunk)
	}
	if t.seen != nil {
		t.seen[k&(seenChunks-1)] = recentChunk{c, k}
	}
}

// at is block i, its chunk made if need be. The pointer stays valid until
// the block is idle and tidy drops its chunk.
func (t *blockTable) at(i int) *block {
	c := t.chunk(i / chunkBlocks)
	if c == nil {
		if t.chunks == nil {
			t.chunks = map[int]*blockChunk{}
		}
		c = new(blockChunk)
		t.chunks[i/chunkBlocks] = c
		t.remember(c, i/chunkBlocks)
	}
	return &c[i%chunkBlocks]
}

// get is a copy of block i: the idle block when its chunk is not made.
func (t *blockTable) get(i int) block {
	if c := t.chunk(i / chunkBlocks); c != nil {
		return c[i%chunkBlocks]
	}
	return block{}
}

// find is block i, or nil when its chunk is not made (the block is idle):
// one lookup for a read's hit.
func (t *blockTable) find(i int) *block {
	if c := t.chunk(i / chunkBlocks); c != nil {
		return &c[i%chunkBlocks]
	}
	return nil
}

// tidy drops the chunk of block i when all its blocks are idle.
func (t *blockTable) tidy(i int) {
	k := i / chunkBlocks
	c := t.chunks[k]
	if c == nil {
		return
	}
	for j := range c {
		if c[j] != (block{}) {
			return
		}
	}
	delete(t.chunks, k)
	for r := range t.recent {
		if t.recent[r].c == c {
			t.recent[r] = recentChunk{}
		}
	}
	if t.seen != nil && t.seen[k&(seenChunks-1)].c == c {
		t.seen[k&(seenChunks-1)] = recentChunk{}
	}
	if len(t.chunks) == 0 {
		t.chunks = nil // a map keeps its largest size; an empty one goes
		t.seen = nil
	}
}

// tidyAll drops every chunk whose blocks are all idle.
func (t *blockTable) tidyAll() {
	for k := range t.chunks {
		t.tidy(k * chunkBlocks)
	}
}

// each calls fn for every block of the chunks made, in order; fn may
// change the block but not make or drop chunks.
func (t *blockTable) each(fn func(i int, b *block)) {
	for _, k := range slices.Sorted(maps.Keys(t.chunks)) {
		c := t.chunks[k]
		for j := range c {
			fn(k*chunkBlocks+j, &c[j])
		}
	}
}

// chunksMade counts the chunks made, for tests.
func (t *blockTable) chunksMade() int { return len(t.chunks) }
