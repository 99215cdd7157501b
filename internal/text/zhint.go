package text

import (
	"math/bits"

	"github.com/klauspost/compress/zstd"
)

// The size hints of compressed JSONL files (see zjsonl.go): a zstd
// frame's content size, or a gzip trailer's size modulo 2^32, used only
// when plausible for the file's compressed size.

// MaxHintRatio bounds a plausible size hint: a hint smaller than the file's
// compressed size, or more than MaxHintRatio times it, is not used.
const MaxHintRatio = 1000

// gzipTargetRatio is the compression ratio assumed when a gzip trailer's
// size modulo 2^32 allows several plausible sizes: the one nearest to it
// (by ratio) is taken. It leans high because a hint too large costs empty
// units while one too small makes the last unit large.
const gzipTargetRatio = 5

// zstdHint returns the content size of the first zstd frame when its
// header records one and it is plausible for a file of size bytes, else 0.
// A file of several frames has only the first one's size here: the hint is
// then too small and the file's last unit holds the rest.
func zstdHint(head []byte, size uint64) uint64 {
	var h zstd.Header
	if err := h.Decode(head); err != nil || h.Skippable || !h.HasFCS {
		return 0
	}
	if !plausible(h.FrameContentSize, size) {
		return 0
	}
	return h.FrameContentSize
}

// zstdWindow is the window size the first zstd frame's header asks a
// decoder to keep (the memory each decoder of the file holds), or 0 when
// the header cannot be read.
func zstdWindow(head []byte) uint64 {
	var h zstd.Header
	if err := h.Decode(head); err != nil || h.Skippable {
		return 0
	}
	if h.SingleSegment { // no window descriptor: the frame is its own window
		return h.FrameContentSize
	}
	return h.WindowSize
}

// gzipHint returns the decompressed size of a gzip file of size bytes whose
// trailer says isize (the size modulo 2^32 of its last member), or 0 when
// no plausible size agrees with it. Of the plausible sizes isize + j*2^32,
// it takes the one nearest to gzipTargetRatio times size, by ratio: for a
// file under about 4 MiB that is isize itself, the only plausible one.
func gzipHint(isize uint32, size uint64) uint64 {
	if size == 0 {
		return 0
	}
	target := size * gzipTargetRatio
	var best uint64
	for d := uint64(isize); plausibleMax(d, size); d += 1 << 32 {
		if d < size {
			continue
		}
		if best == 0 || nearer(d, best, target) {
			best = d
		}
	}
	return best
}

// gzipAmbiguous reports whether a gzip file of size bytes whose trailer
// says isize could hold more than one text size at ordinary JSONL
// compression ratios (1.5x to 12x): its size is then a guess, possibly off
// by a multiple of 4 GiB, and its units uneven (trailing ones empty, or the
// last one large).
func gzipAmbiguous(isize uint32, size uint64) bool {
	lo, hi := size*3/2, size*12
	n := 0
	for d := uint64(isize); d <= hi; d += 1 << 32 {
		if d >= lo {
			n++
		}
	}
	return n > 1
}

// nearer reports whether a is strictly nearer than b to t by ratio
// (max(x,t)/min(x,t)), compared exactly in integers.
func nearer(a, b, t uint64) bool {
	ah, al := max(a, t), min(a, t)
	bh, bl := max(b, t), min(b, t)
	// ah/al < bh/bl  <=>  ah*bl < bh*al
	x1, x0 := bits.Mul64(ah, bl)
	y1, y0 := bits.Mul64(bh, al)
	return x1 < y1 || (x1 == y1 && x0 < y0)
}

func plausibleMax(d, size uint64) bool {
	return d/MaxHintRatio < size || (d/MaxHintRatio == size && d%MaxHintRatio == 0)
}

// plausible reports whether d bytes of text could be a file of size
// compressed bytes: size <= d <= MaxHintRatio*size.
func plausible(d, size uint64) bool { return d >= size && size > 0 && plausibleMax(d, size) }
