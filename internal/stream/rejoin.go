package stream

// Rejoin puts consumer c back at its first step not released, for a new
// process taking the place of one that died without closing: the steps it
// was handed and never released are handed again, in order, and so is the
// end if it was handed. It returns the last step c released with every
// step before it (the step the new process goes on after), or bound when
// that is earlier (and the base's step is not): the consumers of a group
// whose processes died together go on from one step, the earliest any of
// them had not released (ReleasedThrough), so that the group's new
// processes read in lockstep; the steps between are still in the ring, held
// by the consumer that had not released them.
//
// A step c released out of order past that one is taken back too, so that
// the new process gets every step after the returned one exactly once. Its
// slot still holds it: the producer writes slots in step order, and the
// slot after the first one c holds cannot be written again before that one
// is free.
func (p *Pipeline) Rejoin(c int, bound uint64) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	last := max(min(p.releasedThroughLocked(c), bound), p.base.Step)
	for s := last + 1; s <= p.next[c]; s++ {
		f := p.inFlight[s]
		if f == nil || !f.released[c] {
			continue
		}
		f.released[c] = false
		if f.left == 0 {
			p.slotStep[f.Slot] = s
		}
		f.left++
	}
	p.next[c] = last
	p.endSeen[c] = 0
	p.broadcast()
	return last
}

// ReleasedThrough is the last step consumer c released with every step
// before it.
func (p *Pipeline) ReleasedThrough(c int) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.releasedThroughLocked(c)
}

func (p *Pipeline) releasedThroughLocked(c int) uint64 {
	last := p.base.Step
	for s := p.following(last); s != 0 && s <= p.next[c] && p.inFlight[s].released[c]; s = p.following(last) {
		last = s
	}
	return last
}
