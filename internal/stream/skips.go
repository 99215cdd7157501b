package stream

import (
	"context"
	"fmt"
	"slices"

	"github.com/dataloaderd/dataloaderd/internal/state"
)

// A rank's skip log (state.Rank.Skips) names ranges of data steps whose
// batches are made and dropped: before it makes the batch after step
// first-1 of a pending range, the rank moves to step last with SkipTo (by
// counting, or batch by batch for text, without copying a token) and makes
// batch last+1. A batch keeps its data step, so the steps after a range,
// and what dataloaderd explain says of them, are those of a run that
// skipped nothing; only whether a batch is served changes.

// NextStep is the data step of the batch the rank makes next: the one
// after its step, or past the pending ranges that hold it.
func (r *Rank) NextStep() uint64 { return state.NextStep(r.skips, r.step) }

// Skips is the rank's skip log now (a copy), passed ranges and pending.
func (r *Rank) Skips() []state.SkipRange { return slices.Clone(r.skips) }

// skipsAt is the skip log of the rank's state after step (bounded there).
func (r *Rank) skipsAt(step uint64) []state.SkipRange {
	return slices.Clone(state.TrimSkips(r.skips, step))
}

// AddConfigSkips adds the config's skip_steps to the log of the rank at
// its step (state.ConfigSkips: a range before the step is history, one
// that holds it skips what is ahead), returning the warnings for ranges
// before the step that the log lacks. A session calls it once, on the rank
// it opens; dataloaderd explain on the rank it explains from.
func (r *Rank) AddConfigSkips() ([]string, error) {
	skips, warnings, err := state.ConfigSkips(r.skips, r.corpus.cfg.SkipSteps, r.step)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	r.skips = skips
	return warnings, nil
}

// SkipSteps logs the range s as skipped (s.First after the rank's step):
// its batches are made and dropped when the rank reaches them. A range
// the log holds already is no change; one that overlaps a logged range
// without being it is refused, as is one more pending range than
// state.MaxSkipsPending after step floor (the oldest step whose state may
// still be asked).
func (r *Rank) SkipSteps(floor uint64, s state.SkipRange) error {
	if err := state.CheckSkips("skip_steps", []state.SkipRange{s}, 1); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if s.First <= r.step {
		return fmt.Errorf("%w: skip of %v, but the rank has made step %d", ErrStep, s, r.step)
	}
	skips, added, err := state.AddSkip(r.skips, s)
	if err != nil {
		return fmt.Errorf("%w: skip_steps: %v", ErrStep, err)
	}
	if !added {
		return nil
	}
	if n := len(state.PendingSkips(skips, floor)); n > state.MaxSkipsPending {
		return fmt.Errorf("%w: skip of %v: %d ranges would be pending after step %d, more than %d (state.MaxSkipsPending); ask again once some are passed",
			ErrStep, s, n, floor, state.MaxSkipsPending)
	}
	r.skips = state.TrimSkips(skips, floor)
	return nil
}

// skipAhead moves the rank past the pending range that holds its next
// step, if one does, to the step before the batch it makes next, copying
// no token: by counting (SkipTo) in an endless run, batch by batch in a
// bounded one. It records in p the batches passed and their
// lines by dataset, and marks every shard touched so that the next batch's
// delta holds the cursors the skip moved (a skip batch by batch hands its
// deltas to nobody).
func (r *Rank) skipAhead(ctx context.Context, p *Produced) error {
	next := r.NextStep()
	if next == r.step+1 {
		return nil
	}
	before := r.step
	lines := r.datasetLines()
	batch := r.out // the batch to make after: a skip batch by batch sets r.out
	var err error
	if r.fr.epochs == 0 {
		err = r.SkipTo(ctx, next-1)
	} else {
		// A bounded run's count may meet its end and make the rank again
		// in place (SkipTo), which a pipeline reading the rank's logs
		// meanwhile must not see: batch by batch instead.
		_, err = r.skipBatches(ctx, next-1)
	}
	r.out = batch
	if err != nil {
		return fmt.Errorf("skipping steps %d to %d: %w", before+1, next-1, err)
	}
	p.Skipped = r.step - before
	p.SkippedLines = r.datasetLines()
	for d := range lines {
		p.SkippedLines[d] -= lines[d]
	}
	for _, d := range r.datasets {
		for _, sr := range d.all {
			r.touched[sr] = struct{}{}
		}
	}
	return nil
}

// datasetLines counts the lines the rank's shards served, by dataset.
func (r *Rank) datasetLines() []int {
	out := make([]int, len(r.datasets))
	for d, rd := range r.datasets {
		for _, sr := range rd.all {
			out[d] += int(sr.st.Lines)
		}
	}
	return out
}
