package objstore

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"

	"github.com/dataloaderd/dataloaderd/internal/mapped"
)

// blockState is where one block of an object is.
type blockState uint8

const (
	absent   blockState = iota
	fetching            // a fetch is under way; done closes when it ends
	present             // readable in the mapping
)

// block is one BlockSize piece of an object.
type block struct {
	state blockState
	holds int32         // reads holding it present
	done  chan struct{} // while fetching
	err   error         // why the last fetch failed
	elem  *list.Element // in the store's LRU while present and not held
	ahead bool          // queued or fetched ahead of demand, not yet read
}

// Object is one object of a dataset, shared by every session reading it.
// Data maps the whole object; a range of it is readable between Hold and
// Release, which fetch the blocks it spans (once for every session) and
// keep them from eviction.
type Object struct {
	store *Store
	loc   Location
	url   string
	size  int64
	etag  string

	file *os.File
	data []byte

	// Guarded by store.mu.
	blocks   []block
	refs     int  // Open without Close
	replaced bool // a newer ETag was opened; drop when refs reach 0
	freed    bool
}

// URL is the object's s3:// URL.
func (o *Object) URL() string { return o.url }

// Size is the object's length in bytes.
func (o *Object) Size() int64 { return o.size }

// BlockSize is the unit the cache fetches the object in.
func (o *Object) BlockSize() int64 { return o.store.opts.BlockSize }

// ETag is the object's ETag when it was opened.
func (o *Object) ETag() string { return o.etag }

// Data maps the whole object. Only ranges held are readable; an access
// elsewhere faults (mapped.Guard turns that into an error).
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
	bs := o.store.opts.BlockSize
	return int(off / bs), int((off + n - 1) / bs), nil
}

// Hold fetches the blocks of bytes [off, off+n) that are not in the cache,
// waiting for those being fetched, and keeps them all until Release(off, n).
// It fails, holding nothing, when a block cannot be fetched (after the
// retries) or the context ends.
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
	s.mu.Lock()
	for i <= last {
		if o.freed {
			s.mu.Unlock()
			o.releaseBlocks(first, i-1)
			return fmt.Errorf("%w: %s: read after the dataset was closed", ErrObject, o.url)
		}
		b := &o.blocks[i]
		switch b.state {
		case present:
			o.holdLocked(i)
			if b.ahead {
				b.ahead = false
				m.lookups.WithLabelValues("ahead").Inc()
			} else {
				m.lookups.WithLabelValues("hit").Inc()
			}
			i++
			continue
		case fetching:
			done := b.done
			s.mu.Unlock()
			select {
			case <-done:
			case <-ctx.Done():
				o.releaseBlocks(first, i-1)
				return ctx.Err()
			}
			s.mu.Lock()
			if b.state == absent && b.err != nil {
				err := b.err
				s.mu.Unlock()
				o.releaseBlocks(first, i-1)
				return err
			}
			continue
		}
		// Absent: fetch it here, for this read.
		m.lookups.WithLabelValues("miss").Inc()
		o.startLocked(i, false)
		s.mu.Unlock()
		err := o.fetch(ctx, i)
		s.mu.Lock()
		o.finishLocked(i, err)
		if err != nil {
			s.mu.Unlock()
			o.releaseBlocks(first, i-1)
			return err
		}
		if o.freed {
			continue // reported at the top
		}
		o.holdLocked(i)
		i++
	}
	s.mu.Unlock()
	return nil
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

func (o *Object) releaseBlocks(first, last int) {
	s := o.store
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := first; i <= last; i++ {
		b := &o.blocks[i]
		if b.holds--; b.holds == 0 && b.state == present && !o.freed {
			b.elem = s.lru.PushBack(blockRef{o, i})
		}
	}
}

func (o *Object) holdLocked(i int) {
	b := &o.blocks[i]
	if b.elem != nil {
		o.store.lru.Remove(b.elem)
		b.elem = nil
	}
	b.holds++
}

// startLocked marks block i as being fetched and makes room for it. Ahead
// of demand it gives up (false) when the budget has no room.
func (o *Object) startLocked(i int, ahead bool) bool {
	if !o.store.reserveLocked(o.blockLen(i), ahead) {
		return false
	}
	b := &o.blocks[i]
	b.state, b.done, b.err, b.ahead = fetching, make(chan struct{}), nil, ahead
	return true
}

// finishLocked records the end of block i's fetch: present (a fetch ahead
// of demand puts it in the LRU; a read's fetch holds it next), or absent
// with the error.
func (o *Object) finishLocked(i int, err error) {
	s := o.store
	b := &o.blocks[i]
	if err == nil && !o.freed {
		err = o.protect(i, unix.PROT_READ)
	}
	if err != nil || o.freed {
		b.state, b.err = absent, err
		if !o.freed {
			s.used -= o.blockLen(i)
			s.opts.Metrics.cached.Set(float64(s.used))
		}
	} else {
		b.state = present
		if b.ahead && b.holds == 0 {
			b.elem = s.lru.PushBack(blockRef{o, i})
		}
	}
	close(b.done)
	b.done = nil
}

// evictLocked drops present, unheld block i from the cache: the mapping
// becomes inaccessible again and the memory or disk is given back.
func (o *Object) evictLocked(i int) {
	s := o.store
	b := &o.blocks[i]
	if b.elem != nil {
		s.lru.Remove(b.elem)
		b.elem = nil
	}
	b.state, b.ahead = absent, false
	s.used -= o.blockLen(i)
	s.opts.Metrics.evictions.Inc()
	bs := s.opts.BlockSize
	if err := o.protect(i, unix.PROT_NONE); err == nil {
		// A hole reads as zeros, never seen: the pages are inaccessible.
		_ = unix.Fallocate(int(o.file.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(i)*bs, o.blockLen(i))
	}
	if o.refs == 0 && o.presentLocked() == 0 {
		s.dropLocked(o)
	}
}

func (o *Object) presentLocked() int {
	n := 0
	for i := range o.blocks {
		if o.blocks[i].state != absent {
			n++
		}
	}
	return n
}

// protect sets the access of block i's pages (the kernel rounds the last
// block's length up to its page, which the mapping covers).
func (o *Object) protect(i int, prot int) error {
	bs := o.store.opts.BlockSize
	start := int64(i) * bs
	return unix.Mprotect(o.data[start:start+o.blockLen(i)], prot)
}

// fetch reads block i from the store into the backing file.
func (o *Object) fetch(ctx context.Context, i int) error {
	bs := o.store.opts.BlockSize
	buf := make([]byte, 256<<10)
	return o.store.client.get(ctx, o.loc, o.etag, int64(i)*bs, o.blockLen(i), o.file, buf)
}

// Prefetch queues the blocks of bytes [off, off+n) that are absent for the
// fetchers ahead of demand. It never blocks: with the queue full, the
// rest are left for the reads to fetch.
func (o *Object) Prefetch(off, n int64) {
	if n <= 0 {
		return
	}
	first, last, err := o.span(off, n)
	if err != nil {
		return
	}
	s := o.store
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := first; i <= last; i++ {
		b := &o.blocks[i]
		if b.state != absent || b.ahead || o.freed {
			continue
		}
		select {
		case s.queue <- blockRef{o, i}:
			b.ahead = true
		default:
			return
		}
	}
}

// fetchQueued fetches block i if it is still absent.
func (o *Object) fetchQueued(i int) {
	s := o.store
	s.mu.Lock()
	b := &o.blocks[i]
	if b.state != absent || o.freed {
		b.ahead = b.state == present && b.ahead
		s.mu.Unlock()
		return
	}
	if !o.startLocked(i, true) {
		b.ahead = false
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	err := o.fetch(s.ctx, i)
	s.mu.Lock()
	o.finishLocked(i, err)
	if err != nil {
		b.ahead = false
	}
	s.mu.Unlock()
}

// ReadAt copies bytes of the object into p, through the cache.
func (o *Object) ReadAt(p []byte, off int64) (int, error) {
	if off >= o.size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), o.size-off)
	if err := o.Hold(context.Background(), off, n); err != nil {
		return 0, err
	}
	copy(p, o.data[off:off+n])
	o.Release(off, n)
	if n < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

// Dup is one more use of the object, closed on its own.
func (o *Object) Dup() *Object {
	o.store.mu.Lock()
	defer o.store.mu.Unlock()
	o.refs++
	return o
}

// Close ends one Open. The object stays cached for the next reader until
// its blocks are evicted, or it was replaced.
func (o *Object) Close() error {
	s := o.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if o.refs == 0 {
		return nil
	}
	o.refs--
	if o.refs == 0 && (o.replaced || o.presentLocked() == 0 || s.objects[o.url] != o) {
		s.dropLocked(o)
	}
	return nil
}

// free unmaps and closes the backing; reads in flight must have ended.
func (o *Object) free() error {
	if o.freed {
		return nil
	}
	o.freed = true
	var errs []error
	if o.data != nil {
		mapped.Unregister(o.data)
		errs = append(errs, unix.Munmap(o.data))
		o.data = nil
	}
	if o.file != nil {
		errs = append(errs, o.file.Close())
	}
	return errors.Join(errs...)
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

func lookups(m *Metrics, result string) int64 {
	return int64(counterValue(m.lookups.WithLabelValues(result)))
}
