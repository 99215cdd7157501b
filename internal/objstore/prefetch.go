package objstore

import "time"

// Prefetch queues the absent blocks of bytes [off, off+n), in runs of
// consecutive ones, for the fetchers ahead of demand, and the stored ones
// (kept from before a restart, not yet checked) for them to check, so that
// HoldCached finds them present. It never blocks: with the queue full, the
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
	if o.freed {
		return
	}
	last = o.gatherLocked(first, last) // gather.go
	for i := first; i <= last; i++ {
		if !o.blocks.get(i).toFetchAhead() {
			continue
		}
		j := i
		most := max(1, int(maxRunBytes/s.opts.BlockSize))
		for j < last && j-i+1 < most && o.blocks.get(j+1).toFetchAhead() {
			j++
		}
		// What is fetched ahead and unread stays under half the cache.
		// What has waited there longer than StaleAhead will not be read
		// (its shard went to another rank, its reader stopped): it makes
		// room for the newest; fresher, it is kept and this waits.
		for s.aheadBytes+o.runBytes(i, j) > s.budget/2 {
			front := s.aheadLRU.Front()
			if front == nil || time.Since(front.Value.(blockRef).at) < s.opts.StaleAhead {
				return
			}
			ref := front.Value.(blockRef)
			ref.obj.evictLocked(ref.i)
			if o.freed {
				return
			}
		}
		select {
		case s.queue <- runRef{o, i, j}:
			for k := i; k <= j; k++ {
				o.setAheadLocked(k, true)
			}
		default:
			return
		}
		i = j
	}
}

// toFetchAhead reports whether Prefetch queues a block: absent or stored,
// and not queued already.
func (b block) toFetchAhead() bool { return (b.state == absent || b.state == stored) && !b.ahead }

// fetchQueued fetches the blocks of [first, last] still absent, a run of
// consecutive ones at a time, and checks those stored.
func (o *Object) fetchQueued(first, last int) {
	s := o.store
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := first; i <= last; i++ {
		state := o.blocks.get(i).state
		if (state != absent && state != stored) || o.freed {
			continue
		}
		if o.refs == 0 { // its datasets closed: nobody will read it
			o.setAheadLocked(i, false)
			o.blocks.tidy(i)
			continue
		}
		if state == stored {
			o.verifyStoredLocked(s.ctx, i) // a failure leaves it absent, for the read
			continue
		}
		j := i
		for j < last && o.blocks.get(j+1).state == absent {
			j++
		}
		r := o.startLocked(i, j, true)
		if r == nil { // no room: the reads will fetch them
			for k := i; k <= last; k++ {
				if state := o.blocks.get(k).state; state == absent || state == stored {
					o.setAheadLocked(k, false)
					o.blocks.tidy(k)
				}
			}
			return
		}
		s.mu.Unlock()
		err := o.fetch(s.ctx, i, j)
		s.mu.Lock()
		o.finishLocked(i, j, r, err)
		i = j
	}
}
