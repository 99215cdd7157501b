// The scratch of hints. A rank hints its shards' next units each time a
// shard moves (Prefetch, PrefetchEntries): thousands of times a second,
// each grouping the units by file and making the byte spans of their
// entries and tokens. Made anew for each, those slices were the most the
// daemon allocated while it read an epoch (240 of 597 MB in a heap
// profile of BenchmarkObjectsScale), and garbage made at that rate is
// what drives the heap up to its collector's goal. So a hint builds them
// in a scratch it takes from a pool and gives back.

package source

import (
	"cmp"
	"slices"
	"sync"
)

// hintScratch is the slices a hint builds, kept between hints.
type hintScratch struct {
	parts []partSeq
	seqs  []uint64
	spans []byteSpan
}

// partSeq is a unit as a sequence of one of a dataset's parts.
type partSeq struct {
	part int
	seq  uint64
}

// hintScratches are the scratches of the hints running.
var hintScratches = sync.Pool{New: func() any { return new(hintScratch) }}

// maxKeptScratch bounds the units and spans a scratch keeps for the next
// hint; one that grew past it (a window's load of thousands of units) is
// let go.
const maxKeptScratch = 1 << 12

// getScratch takes a scratch from the pool; putScratch gives it back.
func getScratch() *hintScratch { return hintScratches.Get().(*hintScratch) }

func putScratch(sc *hintScratch) {
	if cap(sc.parts) > maxKeptScratch || cap(sc.seqs) > maxKeptScratch || cap(sc.spans) > 2*maxKeptScratch {
		return
	}
	hintScratches.Put(sc)
}

// eachMegatron calls each with every Megatron part that units (of the
// dataset) fall in and their sequences in it, sorted, repeated ones
// once, in sc.seqs; units of other parts and past the dataset are left
// out. each may use sc.spans.
func (d *concatSource) eachMegatron(units []uint64, sc *hintScratch, each func(m *megatronFile, seqs []uint64)) {
	sc.parts = sc.parts[:0]
	for _, u := range units {
		if u >= d.Units() {
			continue
		}
		i, local := d.locate(u)
		if _, ok := d.parts[i].(*megatronFile); ok {
			sc.parts = append(sc.parts, partSeq{i, local})
		}
	}
	slices.SortFunc(sc.parts, func(a, b partSeq) int {
		if a.part != b.part {
			return a.part - b.part
		}
		return cmp.Compare(a.seq, b.seq)
	})
	for k := 0; k < len(sc.parts); {
		part := sc.parts[k].part
		sc.seqs = sc.seqs[:0]
		for ; k < len(sc.parts) && sc.parts[k].part == part; k++ {
			if n := len(sc.seqs); n == 0 || sc.seqs[n-1] != sc.parts[k].seq {
				sc.seqs = append(sc.seqs, sc.parts[k].seq)
			}
		}
		each(d.parts[part].(*megatronFile), sc.seqs)
	}
}
