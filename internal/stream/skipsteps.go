package stream

import (
	"context"
	"fmt"
	"slices"

	"github.com/dataloaderd/dataloaderd/internal/state"
)

// SkipSteps logs the steps of s as skipped (Rank.SkipSteps): their batches
// are made and dropped, and the batch after step s.First-1 is s.Last+1. As
// for a change of weights (SetWeights), batches past s.First-1 that were
// already made are dropped and made again, so none of them may have reached
// a consumer: taken is the last step the consumer asking has read; the
// consumers of a group must each ask (the same range) before they read step
// s.First, and all but the first find the range logged. It returns the
// ranges pending after taken, which a client needs to know which step its
// next batch is.
func (p *Pipeline) SkipSteps(ctx context.Context, s state.SkipRange, taken uint64) ([]state.SkipRange, error) {
	if err := state.CheckSkips("skip_steps", []state.SkipRange{s}, 1); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	after := s.First - 1
	switch {
	case p.closed:
		return nil, ErrClosed
	case p.err != nil:
		return nil, p.err
	case taken > after || after < p.base.Step:
		return nil, fmt.Errorf("%w: skip of %v, but step %d was already read", ErrStep, s, max(taken, p.base.Step))
	}
	if slices.Contains(p.rank.skips, s) { // a group's consumer after the first
		return p.pendingSkips(taken), nil
	}
	if _, _, err := state.AddSkip(p.rank.skips, s); err != nil {
		return nil, fmt.Errorf("%w: skip_steps: %v", ErrStep, err)
	}
	err := p.remakeAfter(ctx, after, func(r *Rank) error { return r.SkipSteps(p.base.Step, s) })
	if err != nil {
		return nil, err
	}
	return p.pendingSkips(taken), nil
}

// Skips is the skip log of the state after step (passed ranges and
// pending), for a session's open reply.
func (p *Pipeline) Skips(step uint64) []state.SkipRange {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rank.skipsAt(step)
}

// pendingSkips is the ranges of the log after step; p.mu is held.
func (p *Pipeline) pendingSkips(step uint64) []state.SkipRange {
	return slices.Clone(state.PendingSkips(p.rank.skips, step))
}

// following is the step of the first batch in flight after step s, 0 when
// none is: the next step, but past a skipped range; p.mu is held.
func (p *Pipeline) following(s uint64) uint64 {
	var next uint64
	for t := range p.inFlight {
		if t > s && (next == 0 || t < next) {
			next = t
		}
	}
	return next
}

// madeAtOrBefore is the last step at or before s (not older than the base)
// whose batch was made: s, or where s lies in a skipped range the step
// before the range; p.mu is held.
func (p *Pipeline) madeAtOrBefore(s uint64) uint64 {
	made := p.base.Step
	for t := range p.inFlight {
		if t <= s && t > made {
			made = t
		}
	}
	return made
}
