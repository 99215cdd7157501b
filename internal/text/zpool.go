package text

import (
	"sync"
	"sync/atomic"
)

// DefaultDecoders is the number of decoders of compressed files a dataset
// keeps open when Spec.Decoders is 0.
const DefaultDecoders = 16

// decoderPool keeps the decoders of a dataset's compressed files, each a
// cursor at the start of some unit of its file, so that reading a file's
// units in order decompresses it once. It holds at most max idle cursors
// (least recently used are closed first).
type decoderPool struct {
	max     int
	mu      sync.Mutex
	cond    sync.Cond
	cursors []*zcursor
	tick    uint64

	starts atomic.Uint64 // decoders started at a file's beginning
	peak   atomic.Uint64 // most bytes of text one read held at once
}

func newDecoderPool(max int) *decoderPool {
	if max <= 0 {
		max = DefaultDecoders
	}
	p := &decoderPool{max: max}
	p.cond.L = &p.mu
	return p
}

// zstash is the lines of a unit a cursor skipped whole on its way to a
// later one (a worker got to unit k+1 of a file before the one reading k):
// the reader of that unit takes them instead of decompressing again.
type zstash struct {
	unit      uint64
	raw       []byte
	line, pos uint64
}

// acquire returns a cursor of f at or before the start of unit k, for the
// caller alone until release, or that unit's lines when a cursor stashed
// them. It waits for a cursor in use that will end up there rather than
// start a new one; failing both it starts a decoder at the file's start.
func (p *decoderPool) acquire(f *zjsonlFile, k uint64) (*zcursor, *zstash, error) {
	p.mu.Lock()
	for {
		if f.closed {
			p.mu.Unlock()
			return nil, nil, errClosed
		}
		var free, busy *zcursor
		var freeAt, busyAt uint64
		for _, c := range p.cursors {
			if c.f != f {
				continue
			}
			if c.stash != nil && c.stash.unit == k {
				st := c.stash
				c.stash = nil
				p.mu.Unlock()
				return nil, st, nil
			}
			switch {
			case !c.busy:
				if c.next <= k && (free == nil || c.next > freeAt) {
					free, freeAt = c, c.next
				}
			case c.target < k:
				if busy == nil || c.target+1 > busyAt {
					busy, busyAt = c, c.target+1
				}
			case c.target == k+1 && c.from < k+1 && !c.skipped:
				busy, busyAt = c, k // will stash unit k
			}
		}
		if free != nil && (busy == nil || freeAt >= busyAt) {
			free.busy, free.from, free.target, free.skipped = true, free.next, k, false
			p.mu.Unlock()
			return free, nil, nil
		}
		if busy == nil {
			break
		}
		p.cond.Wait()
	}
	c := &zcursor{f: f, busy: true, target: k}
	p.cursors = append(p.cursors, c)
	p.evict()
	p.starts.Add(1)
	p.mu.Unlock()
	if err := c.open(); err != nil {
		p.release(c, false)
		return nil, nil, err
	}
	return c, nil, nil
}

// release hands a cursor back; a failed one (!ok), one at its file's end
// or one of a closed file is closed.
func (p *decoderPool) release(c *zcursor, ok bool) {
	p.mu.Lock()
	c.busy = false
	p.tick++
	c.used = p.tick
	switch {
	case !ok || c.f.closed || (c.next >= c.f.n && c.stash == nil):
		p.remove(c)
	case c.next >= c.f.n:
		// At the file's end with a stash no reader has taken yet: the
		// decoder goes, the stash stays until taken or evicted.
		c.close()
	}
	p.evict()
	p.cond.Broadcast()
	p.mu.Unlock()
}

// evict closes idle cursors, least recently used first, down to max.
func (p *decoderPool) evict() {
	for len(p.cursors) > p.max {
		var old *zcursor
		for _, c := range p.cursors {
			if !c.busy && (old == nil || c.used < old.used) {
				old = c
			}
		}
		if old == nil {
			return
		}
		p.remove(old)
	}
}

// remove drops a cursor from the pool and closes it; p.mu is held.
func (p *decoderPool) remove(c *zcursor) {
	for i, x := range p.cursors {
		if x == c {
			p.cursors = append(p.cursors[:i], p.cursors[i+1:]...)
			break
		}
	}
	c.close()
}

// closeFile closes f's idle cursors and marks f closed, so that its busy
// ones are closed when released and no new one starts.
func (p *decoderPool) closeFile(f *zjsonlFile) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f.closed = true
	for i := 0; i < len(p.cursors); {
		if c := p.cursors[i]; c.f == f && !c.busy {
			p.remove(c)
			continue
		}
		i++
	}
	p.cond.Broadcast()
}

func (p *decoderPool) notePeak(n uint64) {
	for {
		old := p.peak.Load()
		if n <= old || p.peak.CompareAndSwap(old, n) {
			return
		}
	}
}

// zcursorBuffer is the read buffer of a decoder; a longer line is
