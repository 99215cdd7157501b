// Reading an object's bytes through its blocks, and an object's lifetime:
// its duplicates and its close.

package objstore

import (
	"context"
	"errors"
	"io"

	"github.com/dataloaderd/dataloaderd/internal/mapped"
)

// ReadAt copies bytes of the object into p, through the cache. It ends
// when the store closes; ReadAtContext ends also with a context.
func (o *Object) ReadAt(p []byte, off int64) (int, error) {
	return o.ReadAtContext(o.store.ctx, p, off)
}

// ReadAtContext is ReadAt that fails, reading nothing, when ctx ends first.
func (o *Object) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if off >= o.size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), o.size-off)
	if err := o.Hold(ctx, off, n); err != nil {
		return 0, err
	}
	copy(p, o.data[off:off+n])
	o.Release(off, n)
	if n < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

// HoldCached holds bytes [off, off+n) as Hold does, but only when every
// block of them is in the cache already: it fetches nothing and never
// waits, and false holds nothing. For hints that must not block (a
// prefetch that needs an index entry to know what to fetch).
func (o *Object) HoldCached(off, n int64) bool {
	if n == 0 {
		return true
	}
	first, last, err := o.span(off, n)
	if err != nil {
		return false
	}
	s := o.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if o.freed {
		return false
	}
	for i := first; i <= last; i++ {
		if o.blocks.get(i).state != present {
			return false
		}
	}
	for i := first; i <= last; i++ {
		// As Hold: the hold takes a block fetched ahead out of the ahead
		// list first, so that its release puts it in the LRU.
		ahead := o.blocks.get(i).ahead
		o.holdLocked(i)
		if ahead {
			o.setAheadLocked(i, false)
			s.opts.Metrics.ahead.Inc()
		} else {
			s.opts.Metrics.hit.Inc()
		}
	}
	return true
}

// HoldLimit is the most bytes of one object a reader should hold at once:
// half the cache's budget.
func (o *Object) HoldLimit() int64 { return o.store.budget / 2 }

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
	if o.refs == 0 && (o.replaced || o.present == 0 || s.objects[o.url] != o) {
		s.dropLocked(o)
		return nil
	}
	if o.refs == 0 {
		// Nobody will read what was fetched ahead for it: it ages with
		// what was read.
		o.blocks.each(func(k int, b *block) {
			if b.ahead && b.state == present && b.holds == 0 {
				s.unlinkLocked(b)
				o.setAheadLocked(k, false)
				b.elem = s.lru.PushBack(blockRef{obj: o, i: k})
			}
		})
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
		o.store.mapped -= int64(len(o.data))
		mapped.Unregister(o.data)
		errs = append(errs, unmap(o.data))
		o.data = nil
	}
	if o.file != nil {
		errs = append(errs, o.file.Close())
	}
	o.closeEntry()
	return errors.Join(errs...)
}
