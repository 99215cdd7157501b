package objstore

import (
	"container/list"
	"context"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// blockState is where one block of an object is.
type blockState uint8

const (
	absent   blockState = iota
	fetching            // a run's GET is under way
	present             // readable in the mapping
	// stored: in the disk cache's file from before this store, read only
	// once its CRC-32C is checked (diskentry.go).
	stored
)

// block is one BlockSize piece of an object: 16 bytes of bookkeeping, in
// a blockTable that holds only the chunks of blocks in use. The zero block
// is idle: absent, unheld, in no LRU.
type block struct {
	elem  *list.Element // in the store's LRU while present and not held
	holds int32         // reads holding it present
	state blockState
	ahead bool // queued or fetched ahead of demand, not yet read
}

// run is one ranged GET of consecutive blocks.
type run struct {
	done chan struct{}
	err  error // set before done closes
}

// maxRunBytes bounds one GET: a read or prefetch of many absent blocks in
// a row fetches them in GETs of up to this many bytes.
const maxRunBytes = 16 << 20

// Object is one object of a dataset, shared by every session reading it.
// Data maps the whole object; a range of it is readable between Hold and
// Release, which fetch the blocks it spans (once for every session) and
// keep them from eviction.
type Object struct {
	store *Store
	loc   Location
	url   string
	size  int64
	ver   version // what every GET must answer

	file *os.File
	data []byte
	// entry names the object's entry in the disk cache, whose blocks
	// whole journal lists; "" in memory (diskentry.go).
	entry   string
	journal *entryJournal

	// Guarded by store.mu.
	blocks   blockTable
	runs     map[int]*run // the GET bringing each block being fetched
	present  int          // blocks not absent (fetching or present)
	refs     int          // Open without Close
	waiting  int          // reads waiting for another's fetch
	replaced bool         // a newer ETag was opened; drop when refs reach 0
	freed    bool
	sums     map[int]uint32 // the CRC-32C of each stored block
	// gathering follows the streams of Prefetch hints (gather.go).
	gathering gathering
}

// URL is the object's s3:// URL.
func (o *Object) URL() string { return o.url }

// Size is the object's length in bytes.
func (o *Object) Size() int64 { return o.size }

// BlockSize is the unit the cache fetches the object in.
func (o *Object) BlockSize() int64 { return o.store.opts.BlockSize }

// ETag is the object's ETag when it was opened, without quotes; "" when
// the store gives none.
func (o *Object) ETag() string { return o.ver.etag }

// Data maps the whole object. Only ranges held hold the object's bytes:
// elsewhere a read may see zeros.
func (o *Object) Data() []byte { return o.data }

func (o *Object) blockLen(i int) int64 {
	bs := o.store.opts.BlockSize
	return min(bs, o.size-int64(i)*bs)
}

// span is the blocks that bytes [off, off+n) lie in.
func (o *Object) span(off, n int64) (first, last int, err error) {
	if off < 0 || n < 0 || off > o.size || n > o.size-off {
		return 0, 0, fmt.Errorf("%w: %s: bytes [%d, %d) outside its %d bytes", ErrObject, o.url, off, off+n, o.size)
	}
	return o.store.blockOf(off), o.store.blockOf(off + n - 1), nil
}

// Hold fetches the blocks of bytes [off, off+n) that are not in the cache
// (consecutive ones in one GET), waits for those being fetched, and keeps
// them all until Release(off, n). It fails, holding nothing, when a block
// cannot be fetched (after the retries), or ctx ends, or the store closes.
// A fetch it waits for that ended with its own reader's context is made
// again for this one.
func (o *Object) Hold(ctx context.Context, off, n int64) error {
	if n == 0 {
		return nil
	}
	first, last, err := o.span(off, n)
	if err != nil {
		return err
	}
	s := o.store
	m := s.opts.Metrics
	i := first
	fail := func(err error) error {
		s.mu.Unlock()
		o.releaseBlocks(first, i-1)
		return err
	}
	s.mu.Lock()
	for i <= last {
		if o.freed {
			return fail(fmt.Errorf("%w: %s: read after the dataset was closed", ErrObject, o.url))
		}
		b := o.blocks.find(i)
		state := absent
		if b != nil {
			state = b.state
		}
		switch state {
		case present:
			ahead := b.ahead
			o.holdBlockLocked(b)
			if ahead {
				o.setAheadLocked(i, false)
				m.ahead.Inc()
			} else {
				m.hit.Inc()
			}
			i++
			continue
		case stored:
			if err := o.checkStoredLocked(ctx, i); err != nil {
				return fail(err)
			}
			i++
			continue
		case fetching:
			if err := o.waitLocked(ctx, i); err != nil {
				return fail(err)
			}
			continue
		}
		// Absent: fetch it and the absent blocks after it, for this read.
		j := o.absentRunLocked(i, last)
		r := o.startLocked(i, j, false)
		if r == nil {
			continue // freed: reported at the top
		}
		m.miss.Add(float64(j - i + 1))
		s.mu.Unlock()
		err := o.fetch(ctx, i, j)
		s.mu.Lock()
		o.finishLocked(i, j, r, err)
		if err != nil {
			return fail(err)
		}
		if o.freed {
			continue // reported at the top
		}
		for ; i <= j; i++ {
			o.holdLocked(i)
		}
	}
	s.mu.Unlock()
	return nil
}

// waitLocked waits for the fetch of block i under way. Its error is the
// wait's when the fetch failed for its own sake, or ctx ended; a fetch that
// ended with its reader's context leaves the block absent, for the caller
// to fetch.
func (o *Object) waitLocked(ctx context.Context, i int) error {
	s := o.store
	r := o.runs[i]
	o.waiting++
	s.mu.Unlock()
	select {
	case <-r.done:
	case <-ctx.Done():
		s.mu.Lock()
		o.waiting--
		return ctx.Err()
	}
	s.mu.Lock()
	o.waiting--
	if r.err != nil && o.blocks.get(i).state == absent && (ctx.Err() != nil || !ended(r.err)) {
		return r.err
	}
	return nil
}

// setAheadLocked marks block k as fetched ahead and not yet read, or not,
// keeping the store's count of such bytes.
func (o *Object) setAheadLocked(k int, v bool) {
	if o.blocks.get(k).ahead == v {
		return
	}
	b := o.blocks.at(k)
	b.ahead = v
	if v {
		o.store.aheadBytes += o.blockLen(k)
	} else {
		o.store.aheadBytes -= o.blockLen(k)
	}
}

// absentRunLocked returns the last block of the run of absent blocks that
// starts at i, within last and maxRunBytes.
func (o *Object) absentRunLocked(i, last int) int {
	most := max(1, int(maxRunBytes/o.store.opts.BlockSize))
	j := i
	for j < last && j-i+1 < most && o.blocks.get(j+1).state == absent {
		j++
	}
	return j
}

// Release lets the blocks of a Hold(off, n) be evicted again.
func (o *Object) Release(off, n int64) {
	if n == 0 {
		return
	}
	first, last, err := o.span(off, n)
	if err != nil {
		return
	}
	o.releaseBlocks(first, last)
}

// releaseBlocks ends a hold of blocks [first, last]. A block no read
// holds any more goes to the back of the LRU: moved there when it stayed
// in it while held (no allocation), put back when an eviction took it out.
func (o *Object) releaseBlocks(first, last int) {
	s := o.store
	s.mu.Lock()
	for i := first; i <= last; i++ {
		b := o.blocks.at(i)
		if b.holds--; b.holds < 0 {
			s.mu.Unlock()
			panic(fmt.Sprintf("objstore: %s: block %d released more often than held", o.url, i))
		}
		switch {
		case b.holds > 0 || b.state != present || o.freed:
		case b.elem != nil:
			s.lru.MoveToBack(b.elem)
		default:
			b.elem = s.lru.PushBack(blockRef{obj: o, i: i})
		}
		if *b == (block{}) {
			o.blocks.tidy(i)
		}
	}
	s.mu.Unlock()
}

// holdLocked holds block i. A block read before stays where it is in the
// LRU (evictLocked passes over it while held); one fetched ahead leaves
// the LRU of those.
func (o *Object) holdLocked(i int) { o.holdBlockLocked(o.blocks.at(i)) }

func (o *Object) holdBlockLocked(b *block) {
	if b.ahead || b.state != present {
		o.store.unlinkLocked(b)
	}
	b.holds++
}

// runBytes is the length of blocks [i, j].
func (o *Object) runBytes(i, j int) int64 {
	bs := o.store.opts.BlockSize
	return min(int64(j+1)*bs, o.size) - int64(i)*bs
}

// startLocked marks absent blocks [i, j] as being fetched by one run, after
// making room for them. Ahead of demand it gives up (nil) when the budget
// has no room.
func (o *Object) startLocked(i, j int, ahead bool) *run {
	if !o.store.reserveLocked(o.runBytes(i, j), ahead) {
		return nil
	}
	if o.freed { // the room was made by dropping this very object
		o.store.used -= o.runBytes(i, j)
		return nil
	}
	r := &run{done: make(chan struct{})}
	for k := i; k <= j; k++ {
		b := o.blocks.at(k)
		b.state = fetching
		o.present++
		o.runs[k] = r
		o.setAheadLocked(k, ahead)
	}
	return r
}

// finishLocked records the end of run r over blocks [i, j]: present (a run
// ahead of demand puts them in the LRU; a read's run holds them next), or
// absent with the error.
func (o *Object) finishLocked(i, j int, r *run, err error) {
	s := o.store
	r.err = err
	for k := i; k <= j; k++ {
		b := o.blocks.at(k)
		delete(o.runs, k)
		if err != nil || o.freed {
			b.state = absent
			o.present--
			o.setAheadLocked(k, false)
			o.blocks.tidy(k)
			continue
		}
		b.state = present
		if b.ahead && b.holds == 0 {
			b.elem = s.aheadLRU.PushBack(blockRef{o, k, time.Now()})
		}
	}
	if err != nil && !o.freed {
		s.used -= o.runBytes(i, j)
		s.opts.Metrics.cached.Set(float64(s.used))
		o.punch(i, j) // what a failed GET wrote before it failed
	}
	close(r.done)
}

// evictLocked drops present, unheld block i from the cache and gives its
// memory or disk back (a hole is punched: no read holds it, so none sees
// the zeros it reads as). A held block, met in the LRU, only leaves it.
func (o *Object) evictLocked(i int) {
	s := o.store
	b := o.blocks.at(i)
	s.unlinkLocked(b)
	if b.holds > 0 { // held where it lay in the LRU: its release puts it back
		return
	}
	b.state = absent
	o.present--
	o.setAheadLocked(i, false)
	o.blocks.tidy(i)
	s.used -= o.blockLen(i)
	s.opts.Metrics.evictions.Inc()
	o.journalEvicted(i)
	o.punch(i, i)
	if o.refs == 0 && o.present == 0 {
		s.dropLocked(o)
	}
}

// punch gives back the memory or disk of blocks [i, j].
func (o *Object) punch(i, j int) {
	if o.file == nil || o.freed {
		return
	}
	off := int64(i) * o.store.opts.BlockSize
	if err := unix.Fallocate(int(o.file.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, o.runBytes(i, j)); err != nil {
		o.store.punchFailed(err)
	}
}
