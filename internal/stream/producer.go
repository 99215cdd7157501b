package stream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/mapped"
)

// Run produces batches until ctx ends, the pipeline is closed, or the
// rank's iteration has ended for good: its last batch made and released by
// every consumer. Until then the end is not final: a change of weights
// (SetWeights) may drop batches made before it, and the end found after
// them, and Run makes them again. A production error is returned and handed
// to every consumer.
//
// The producer is busy from the moment it starts a batch until the hook
// that announces it (Produced, or Finished for the end) returned: a change
// of weights waits for that, so it takes back announcements all made, and
// none is made after it for a batch it dropped.
func (p *Pipeline) Run(ctx context.Context) (err error) {
	defer func() {
		p.mu.Lock()
		step := p.produced
		p.mu.Unlock()
		if p.hooks.Finished != nil && err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrClosed) {
			_ = p.hook(func() { p.hooks.Finished(step, err) }) // a ring cut short has no reader
		}
		p.mu.Lock()
		p.setIdle()
		p.mu.Unlock()
	}()
	for {
		step, slot, err := p.awaitSlot(ctx)
		if err != nil {
			return err
		}
		// The batch is copied from mapped corpus files into a slot that may
		// be a mapped file too: either cut short under the daemon faults,
		// which fails this pipeline alone.
		var prod Produced
		p.rank.stop = ctx // a skip before the batch ends with the producer
		err = guardMapped(func() error {
			var gerr error
			prod, gerr = p.rank.NextBatchBytes(p.ring.Slot(slot))
			return gerr
		})
		if c, ok := p.ring.(committer); ok && err == nil && prod.Lines > 0 {
			copied := time.Now()
			if cerr := c.Commit(slot); cerr != nil {
				err = fmt.Errorf("copying the batch to its device slot: %w", cerr)
			}
			prod.Cost[CauseDeviceCopy] += time.Since(copied)
		}
		b, err := p.record(step, slot, prod, err)
		switch {
		case err != nil:
			return err
		case b.End:
			if final, err := p.atEnd(ctx, b.Step); final || err != nil {
				return err
			}
		case p.hooks.Produced != nil:
			if err := p.hook(func() { p.hooks.Produced(b) }); err != nil {
				return p.fail(step, err)
			}
		}
	}
}

// awaitSlot waits until the slot of the next step is free and no change of
// weights holds the producer, and marks the producer busy; it returns the
// step to make and its slot, or why production stops.
func (p *Pipeline) awaitSlot(ctx context.Context) (step uint64, slot int, err error) {
	n := uint64(len(p.slotStep))
	p.mu.Lock()
	p.setIdle() // the last batch is announced
	from := p.rank.NextStep() - 1
	waited := false
	if p.slotStep[int(from%n)] != 0 && !p.closed && p.hooks.SlotWait != nil {
		p.mu.Unlock()
		if err := p.hook(func() { p.hooks.SlotWait(true) }); err != nil {
			return 0, 0, p.fail(from+1, err)
		}
		waited = true
		p.mu.Lock()
	}
	// The slot of a step is fixed ((step-1) mod slots: the control block's
	// readers find a step there), past a skipped range too.
	err = p.wait(ctx, func() bool { return p.closed || !p.pause && p.slotStep[int((p.rank.NextStep()-1)%n)] == 0 })
	if err == nil && p.closed {
		err = ErrClosed
	}
	step = p.rank.NextStep()
	slot = int((step - 1) % n)
	p.busy = err == nil
	p.mu.Unlock()
	if waited {
		if err := p.hook(func() { p.hooks.SlotWait(false) }); err != nil {
			return 0, 0, p.fail(step, err)
		}
	}
	return step, slot, err
}

// record files what the producer made of step: its batch, the end of the
// rank's iteration (an End batch at the last step), or its error; and
// wakes the consumers. The producer stays busy.
func (p *Pipeline) record(step uint64, slot int, prod Produced, err error) (Batch, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.broadcast()
	switch {
	case err != nil:
		p.err = fmt.Errorf("producing step %d: %w", step, err)
		return Batch{}, p.err
	case prod.Lines == 0:
		p.ended = true
		return Batch{Step: p.produced, End: true}, nil
	}
	if got := p.rank.Step(); got != step {
		p.err = fmt.Errorf("producing step %d: the rank made step %d", step, got)
		return Batch{}, p.err
	}
	b := Batch{Step: step, Slot: slot, Lines: prod.Lines, DatasetLines: prod.DatasetLines,
		Segments: prod.Segments, MaxSeqlen: prod.MaxSeqlen, Weights: prod.Weights, Cost: prod.Cost,
		Skipped: prod.Skipped, SkippedLines: prod.SkippedLines}
	p.produced = step
	p.slotStep[slot] = step
	p.inFlight[step] = &inFlight{Batch: b, delta: prod.Delta, released: make([]bool, p.consumers), left: p.consumers}
	return b, nil
}

// atEnd announces the end of the rank's iteration after step last
// (Finished), then waits until that end is final (true), a change of
// weights took it back (false, nil: the batches after its step are to be
// made again), or production stops (its error).
func (p *Pipeline) atEnd(ctx context.Context, last uint64) (final bool, err error) {
	if p.hooks.Finished != nil {
		if err := p.hook(func() { p.hooks.Finished(last, nil) }); err != nil {
			return false, p.fail(last+1, err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setIdle()
	err = p.wait(ctx, func() bool { return p.closed || !p.ended || p.endFinal() })
	switch {
	case err != nil:
		return false, err
	case p.closed:
		return false, ErrClosed
	}
	return p.ended, nil
}

// endFinal reports whether the rank's iteration ended for good: every
// consumer released every batch, and a change of weights remakes only
// batches after the step every consumer released. p.mu is held.
func (p *Pipeline) endFinal() bool { return p.ended && p.base.Step == p.produced }

// setIdle marks the producer between batches, its announcements made, and
// wakes a change of weights waiting for that; p.mu is held.
func (p *Pipeline) setIdle() {
	if p.busy {
		p.busy = false
		if p.pause {
			p.broadcast()
		}
	}
}

// hook runs a hook that may write the ring's control block, a mapped file.
func (p *Pipeline) hook(fn func()) error {
	return guardMapped(func() error { fn(); return nil })
}

// guardMapped runs the pipeline's accesses to mapped memory; a variable so
// that a benchmark can measure the guard's cost against a plain call.
var guardMapped = mapped.Guard

// fail ends production with err, which consumers get from Next.
func (p *Pipeline) fail(step uint64, err error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = fmt.Errorf("producing step %d: %w", step, err)
	}
	p.broadcast()
	return p.err
}
