package stream

import (
	"context"
	"fmt"
	"slices"
)

// SetWeights changes the mixing weights from batch after+1 on, as
// Rank.SetWeights does. Batches past `after` that were already made are
// dropped and made again under the new weights, so none of them may have
// reached a consumer: taken is the last step the consumer asking has read;
// the consumers of a group must each ask (with the same weights) before
// they read step after+1, and all but the first find the change made. A
// stream of messages may have been handed batches past `after`, and the
// end after them, which its consumer drops by their older generation
// (Generation). The producer is held meanwhile; a rank that had found its
// end is made again too (the end is taken back: see Run), so no line of it
// is lost.
func (p *Pipeline) SetWeights(ctx context.Context, after, taken uint64, weights []float64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return ErrClosed
	case p.err != nil:
		return p.err
	case taken > after || after < p.base.Step:
		return fmt.Errorf("%w: weights for the batches after step %d, but step %d was already read", ErrStep, after, max(taken, p.base.Step))
	}
	// The consumers of a group each ask for the change before they read the
	// batch it starts at: the first makes it, the others find it made.
	if made, ok := p.rank.changedAt(after); ok {
		if slices.Equal(made, weights) {
			return nil
		}
		if p.consumers > 1 {
			return fmt.Errorf("%w: the consumers of this group asked for different weights from step %d (%v, now %v); every consumer must ask for the same",
				ErrStep, after+1, made, weights)
		}
	}
	if err := p.rank.checkQueue(p.base.Step, after); err != nil {
		return err
	}
	return p.remakeAfter(ctx, after, func(r *Rank) error { return r.setWeights(p.base.Step, after, weights) })
}

// remakeAfter changes the rank from the batch after step `after` on by
// change: it holds the producer, and where batches past `after` were made
// already, drops them and makes the rank of step `after` again from its
// state, as a resume does, for change to change; the batches made again
// have a new generation. p.mu is held.
func (p *Pipeline) remakeAfter(ctx context.Context, after uint64, change func(*Rank) error) error {
	p.pause = true
	defer func() {
		p.pause = false
		p.broadcast()
	}()
	p.broadcast()
	if err := p.wait(ctx, func() bool { return !p.busy || p.closed }); err != nil {
		return err
	}
	switch {
	case p.closed:
		return ErrClosed
	case p.err != nil:
		return p.err
	}
	if after >= p.produced {
		return change(p.rank)
	}
	rank, err := p.rankAt(ctx, after)
	if err != nil {
		return fmt.Errorf("making step %d's rank again: %w", after, err)
	}
	if err := change(rank); err != nil {
		return err
	}
	for s := after + 1; s <= p.produced; s++ {
		if f := p.inFlight[s]; f != nil {
			p.slotStep[f.Slot] = 0
			delete(p.inFlight, s)
		}
	}
	p.rank, p.produced, p.ended = rank, after, false
	for c := range p.next {
		p.next[c] = min(p.next[c], after)
	}
	p.gen++
	if p.hooks.Remade != nil {
		if err := p.hook(func() { p.hooks.Remade(after) }); err != nil {
			return err
		}
	}
	return nil
}

// rankAt makes the rank of step `after` again from its state, as a resume
// does: from the state after the last batch made at or before it, moved on
// to it where it lies in a skipped range. p.mu is held.
func (p *Pipeline) rankAt(ctx context.Context, after uint64) (*Rank, error) {
	made := p.madeAtOrBefore(after)
	rank, err := p.rank.remake(ctx, made, p.shardsAt(made))
	if err != nil {
		return nil, err
	}
	if after > made {
		if err := rank.SkipTo(ctx, after); err != nil {
			return nil, err
		}
	}
	return rank, nil
}

// Generation counts the times batches were dropped to be made again; a
// batch handed out carries the generation it was made in.
func (p *Pipeline) Generation() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen
}
