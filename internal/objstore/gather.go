package objstore

// Gathering sequential hints. A reader that goes through a stretch of an
// object in order (a shard reading its units in runs, run_tokens) hints
// its next units, a fixed depth ahead of its reads, each time it moves:
// the new part of each hint is about a block, and fetched as hinted that
// is a GET per block; at tens of milliseconds a request the GETs, not the
// bytes, then bound the rate. So an object keeps the last few streams of
// hints that continued one another, and a hint that continues one queues
// its new tail only once the tail is a quarter of the hint's depth: GETs
// of a quarter of the depth, while the reader keeps at least three
// quarters of it fetched or on their way (with a half, fewer GETs, but at
// 50 ms a request the shallower depth cost more than the GETs saved:
// docs/benchmarks.md, "At scale"). Nothing is fetched that was not
// hinted: reading past a hint, as a kernel reads ahead of a file, fetched
// at each end of a run blocks no read wanted, which held the part of the
// cache that fetches ahead may use until they went stale (tried: 2.7 M
// tokens/s against 8.2 without, on a corpus of many runs). A hint that
// continues nothing (a random read) is queued whole.

// gatherStreams is how many streams of hints an object follows at once
// (a shard of a rank reading it is one); past that the oldest is forgotten.
const gatherStreams = 64

// hintStream is one stream of hints: queued is the block after the last
// one it queued.
type hintStream struct {
	queued int
}

// gathering is an object's streams of hints, guarded by the store's mutex.
type gathering struct {
	streams [gatherStreams]hintStream
	used    int // streams in use; past gatherStreams, oldest the next to go
	oldest  int
}

// gatherLocked returns the last block of a hint of blocks [first, last] to
// queue now: last, or, for a hint that continues a stream whose new tail
// is under a quarter of the hint, the stream's end (the tail waits to
// grow).
func (o *Object) gatherLocked(first, last int) int {
	g := &o.gathering
	for k := range g.used {
		st := &g.streams[k]
		if first > st.queued || last < st.queued-1 {
			continue // neither continues nor overlaps its end
		}
		if tail := last + 1 - st.queued; tail > 0 && tail < (last-first+1)/4 {
			return st.queued - 1
		}
		st.queued = max(st.queued, last+1)
		return last
	}
	st := hintStream{queued: last + 1}
	if g.used < gatherStreams {
		g.streams[g.used] = st
		g.used++
	} else {
		g.streams[g.oldest] = st
		g.oldest = (g.oldest + 1) % gatherStreams
	}
	return last
}
