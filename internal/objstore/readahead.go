package objstore

// Read-ahead of sequential hints. A reader that goes through a stretch of
// an object in order (a shard reading its units in runs, run_tokens) hints
// its next few units at a time, and the new part of each hint is about a
// block: fetched as hinted, that is a GET per block, and at tens of
// milliseconds a request the GETs, not the bytes, bound the rate. So, as a
// kernel reads ahead of a file read in order, an object keeps the last
// few streams of hints that continued one another, and a hint that
// continues one is extended past its end by a window that doubles, from
// readAheadFirst blocks up to readAheadMost(): fewer, larger GETs of bytes
// the stream reads next. A hint that continues nothing (a random read) is
// fetched as hinted. What is read ahead counts, as every prefetch, in the
// half of the cache that fetches ahead may use.

// readAheadStreams is how many streams of hints an object follows at once
// (a shard of a rank reading it is one); past that the oldest is forgotten.
const readAheadStreams = 64

// readAheadFirst is the window in blocks of a stream's first extension.
const readAheadFirst = 2

// readAheadBytes bounds a stream's window.
const readAheadBytes = 2 << 20

// aheadStream is one stream of hints: next is the block after the last
// one hinted, end the block after the last one read ahead, window the
// blocks of its last extension.
type aheadStream struct {
	next, end, window int
}

// readAhead is an object's streams of hints, guarded by the store's mutex.
type readAhead struct {
	streams [readAheadStreams]aheadStream
	used    int // streams in use; past readAheadStreams, oldest the next to go
	oldest  int
}

// readAheadMost is a stream's largest window in blocks: readAheadBytes,
// and at most a 64th of the cache's budget, so that the streams of a small
// cache read ahead within the half that fetches ahead may take.
func (s *Store) readAheadMost() int {
	return max(1, int(min(readAheadBytes, s.budget/64)/s.opts.BlockSize))
}

// extendLocked returns the last block to fetch for a hint of blocks
// [first, last]: last, or past it when the hint continues a stream whose
// read-ahead is less than half a window ahead of it.
func (o *Object) extendLocked(first, last int) int {
	ra := &o.readAhead
	for k := range ra.used {
		st := &ra.streams[k]
		if first > st.next || last+1 < st.next {
			continue // neither continues nor overlaps its end
		}
		st.next = max(st.next, last+1)
		if st.end-st.next < st.window/2 {
			st.window = min(max(2*st.window, readAheadFirst), o.store.readAheadMost())
			st.end = max(st.end, st.next) + st.window
		}
		return min(max(last, st.end-1), o.lastBlock())
	}
	st := aheadStream{next: last + 1, end: last + 1}
	if ra.used < readAheadStreams {
		ra.streams[ra.used] = st
		ra.used++
	} else {
		ra.streams[ra.oldest] = st
		ra.oldest = (ra.oldest + 1) % readAheadStreams
	}
	return last
}

// lastBlock is the object's last block.
func (o *Object) lastBlock() int {
	bs := o.store.opts.BlockSize
	return int((o.size - 1) / bs)
}
