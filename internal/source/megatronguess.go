// Opening a Megatron index in object storage in one round trip. Its open
// reads the header, then the first and last entries (the token count the
// cut needs exactly), then the entries where the corpus cuts its shards
// and their runs (Spec.OffsetProbes): each needs the one before, a round
// trip each to the store. But the header's counts follow, almost always,
// from the index's size, which the listing or HEAD gave: an index of N
// sequences, each its own document, as Megatron's preprocessing writes
// them (N+1 document indices, no sequence modes), is 34 + 20N bytes; and
// the .bin's size gives the tokens for each token size. So, before the
// header is read, the open asks for the blocks of all three at once,
// guessed from the two sizes, and the reads that follow find them in the
// node's cache. A wrong guess (documents of several sequences, another
// token size) has fetched a few blocks for nothing, and the reads fetch
// what they need, as they would have without it.

package source

import (
	"cmp"
	"slices"
)

// guessTokenSizes are the token sizes the open's guesses try: Megatron's
// preprocessing writes uint16 tokens for a vocabulary under 65,500 and
// int32 ones above.
var guessTokenSizes = [...]uint64{2, 4}

// prefetchOpen asks the node's cache for what an index in object storage's
// open reads, for the sequence count guessed from its size: its header,
// then its first and last entries, then what probes (nil: none) names for
// each guessed token count, the entries of some units and the pointers
// of others, each joined into few ranged GETs. Queued in that order, the
// first are fetched first when the fetchers are fewer than the GETs. It
// never blocks.
func (m *megatronFile) prefetchOpen(probes CutProbes) {
	size := uint64(m.idxBlob.Size())
	m.idxBlob.Prefetch(0, min(size, uint64(megatronHeaderSize)))
	n, ok := guessSequences(size)
	if !ok {
		return
	}
	guess := &megatronFile{idxBlob: m.idxBlob, sequences: n,
		lengthsAt: uint64(megatronHeaderSize), pointersAt: uint64(megatronHeaderSize) + 4*n}
	fetchSpans(m.idxBlob, guess.entrySpans(nil, []uint64{0, n - 1}), false)
	if probes == nil {
		return
	}
	var entries, offsets []uint64
	for _, tokenSize := range guessTokenSizes {
		e, o := probes(n, uint64(len(m.bin))/tokenSize)
		entries, offsets = append(entries, e...), append(offsets, o...)
	}
	spans := guess.entrySpans(nil, sortedBelow(entries, n))
	for _, i := range sortedBelow(offsets, n) {
		spans = append(spans, byteSpan{guess.pointersAt + 8*i, 8 * min(2, n-i)})
	}
	slices.SortFunc(spans, func(a, b byteSpan) int { return cmp.Compare(a.off, b.off) })
	fetchSpans(m.idxBlob, spans, false)
}

// sortedBelow sorts units, drops those repeated, and those not below n.
func sortedBelow(units []uint64, n uint64) []uint64 {
	slices.Sort(units)
	units = slices.Compact(units)
	k, _ := slices.BinarySearch(units, n)
	return units[:k]
}

// guessSequences is the sequence count of an index of size bytes that
// holds one document per sequence: 34 + 20N bytes, or 34 + 21N with a
// sequence mode each. False when neither fits.
func guessSequences(size uint64) (uint64, bool) {
	// The header and the document index's last entry (N+1 of them).
	const fixed = uint64(megatronHeaderSize) + 8
	if size <= fixed {
		return 0, false
	}
	for _, perSequence := range []uint64{20, 21} {
		if (size-fixed)%perSequence == 0 {
			return (size - fixed) / perSequence, true
		}
	}
	return 0, false
}
