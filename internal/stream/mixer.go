package stream

import (
	"context"
	"fmt"
	"slices"

	"github.com/dataloaderd/dataloaderd/internal/state"
)

// restoreMixture sets the rank's step and mixture from the restored state
// (nil: the beginning): the log's history, the changes queued for later
// batches, the weights or schedule in effect, and, under a schedule, the
// shares summed since the log's last change. It reports whether the mixing
// counts restart at the restored step (reweigh).
func (r *Rank) restoreMixture(ctx context.Context, from *state.Restored) (reweigh bool, err error) {
	cfg := r.corpus.cfg
	weights := make([]float64, len(cfg.Datasets))
	for i, d := range cfg.Datasets {
		weights[i] = d.Weight
	}
	if from != nil {
		if from.Step > maxCount {
			return false, fmt.Errorf("%w: restored step %d is beyond %d", state.ErrMismatch, from.Step, uint64(maxCount))
		}
		if err := state.CheckMixture("restored ", from.Mixture, r.corpus.DatasetNames()); err != nil {
			return false, err
		}
		r.step = from.Step
	}
	// The configured mixture from the restored step on, as the log records it.
	configured := state.MixChange{Step: r.step, Weights: weights}
	if len(cfg.Schedule) > 0 {
		configured.Weights = state.ScheduleWeights(cfg.Schedule, r.step+1, nil)
		configured.Schedule = cfg.Schedule
	}
	if from == nil || len(from.Mixture) == 0 { // the second: saved before the mixture log
		r.mixture = []state.MixChange{configured}
	} else if reweigh, err = r.resumeMixture(from, configured); err != nil {
		return false, err
	}
	current := r.mixture[len(r.mixture)-1]
	r.schedule = current.Schedule
	r.weights = slices.Clone(current.Weights)
	if len(r.schedule) == 0 {
		return reweigh, nil
	}
	// The schedule's shares since the log's last change, summed as the
	// uninterrupted run summed them.
	if n := rampSteps(r.schedule, current.Step, r.step); n > maxScheduleReplay {
		return false, fmt.Errorf("%w: a schedule resumed at step %d has %d steps of ramps since the mixture's last change at step %d to sum (at most %d)",
			state.ErrMismatch, r.step, n, current.Step, maxScheduleReplay)
	}
	r.share = newShareSum(r.schedule, current.Step)
	if err := r.share.advance(ctx, r.step); err != nil {
		return false, fmt.Errorf("summing the schedule's shares up to the restored step %d: %w", r.step, err)
	}
	r.weights = state.ScheduleWeights(r.schedule, r.step+1, nil)
	return reweigh, nil
}

// resumeMixture takes a saved log: its history (the entry in effect last)
// and its queued changes. A resume whose configured weights (or schedule)
// differ from those the saved run was configured with, or whose saved ranks
// disagree, is a change of weights at the resumed step, over the changes
// made at run time (queued ones included): mixing counts restart there.
// Otherwise the saved log's entry in effect stays in effect (a change made
// at run time included) and its queued changes stay queued.
func (r *Rank) resumeMixture(from *state.Restored, configured state.MixChange) (reweigh bool, err error) {
	history, queued, err := state.SplitMixture("restored ", from.Mixture, r.step)
	if err != nil {
		return false, err
	}
	if len(history) == 0 {
		return false, fmt.Errorf("%w: the restored mixture log has no entry at or before step %d, only changes queued after it",
			state.ErrMismatch, r.step)
	}
	r.mixture = state.CloneMixture(history)
	r.pending = state.CloneMixture(queued)
	last := r.mixture[len(r.mixture)-1]
	switch {
	case from.MixturesDiffer || !state.SameMixture(state.LastConfigured(r.mixture), configured):
		r.appendMixture(configured)
		r.pending = nil
		return true, nil
	case len(last.Schedule) > 0 && from.FromSize != r.dpSize:
		// Under a schedule a resume on another world size restarts the
		// counts: the rule follows the schedule integrated over the steps
		// of this rank's lines, and a rescale changes the lines a step.
		last.Step = r.step
		r.appendMixture(last)
		return true, nil
	}
	// A change made at run time for the batch after the saved step: its
	// counts restart with that batch (again, if they did).
	return last.Step == r.step && r.step > 0, nil
}

// appendMixture adds a change in effect to the mixture log's history,
// which keeps MaxMixLog entries (state.TrimMixture).
func (r *Rank) appendMixture(mc state.MixChange) {
	r.mixture = state.TrimMixture(append(r.mixture, mc), r.step)
}

// SetWeights changes the mixing weights from batch after+1 on (after >= the
// rank's step): they replace the configured weights or schedule, the change
// is logged (as made at run time), and the mixing counts restart there. It
// also replaces the changes asked for earlier that would take effect from
// that batch on: the newest call wins for the steps after its own. At most
// state.MaxQueued changes wait for later batches; one more is refused.
func (r *Rank) SetWeights(after uint64, weights []float64) error {
	if after < r.step {
		return fmt.Errorf("%w: weights for the batches after step %d, but the rank has produced step %d", ErrStep, after, r.step)
	}
	if err := state.CheckWeights(weights, r.corpus.DatasetNames(), true); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	// The rank's state at its step queues its pending changes.
	if err := queueBound(r.pending, r.step, after); err != nil {
		return err
	}
	keep := len(r.pending)
	if i := slices.IndexFunc(r.pending, func(mc state.MixChange) bool { return mc.Step >= after }); i >= 0 {
		keep = i
	}
	r.pending = append(r.pending[:keep], state.MixChange{Step: after, Weights: slices.Clone(weights), Runtime: true})
	if after == r.step {
		r.applyPending()
	}
	return nil
}

// queueBound refuses a change of weights for the batches after `after`
// when the state at step whose mixture log is m (its entries after step,
// at least) would queue, with the change, more than state.MaxQueued: when
// m holds that many changes after step for steps before `after` (those
// from `after` on the change replaces). It is the one count of the bound:
// a rank alone asks it of its pending changes at its step, a pipeline of
// its log at the last step its consumers released, which is what the
// state saved after the last consumed batch queues (its rank may have
// produced, and taken changes in effect, ahead of that).
func queueBound(m []state.MixChange, step, after uint64) error {
	n := 0
	for _, mc := range m {
		if mc.Step > step && mc.Step < after {
			n++
		}
	}
	if n >= state.MaxQueued {
		return queueFull(after, n)
	}
	return nil
}

// queueFull is the error of a change of weights refused because n changes
// wait for steps before its own.
func queueFull(after uint64, n int) error {
	return fmt.Errorf("%w: weights for the batches after step %d: %d changes of weights are queued for earlier batches, and at most %d may wait (state.MaxQueued); ask again once some took effect",
		ErrStep, after, n, state.MaxQueued)
}

// applyPending puts the first pending change in effect: logged, the schedule (if
// any) replaced, and every owned shard's count restarted (each shard goes
// into the next delta, so the saved state has every base).
func (r *Rank) applyPending() {
	mc := r.pending[0]
	r.pending = r.pending[1:]
	r.appendMixture(mc)
	r.schedule, r.share = nil, nil
	r.weights = slices.Clone(mc.Weights)
	for _, d := range r.datasets {
		d.lines = 0
		for _, sr := range d.all {
			sr.st.Base = sr.st.Lines
			r.touched[sr] = struct{}{}
		}
	}
}

// pickDataset returns the active dataset furthest behind its share of the
// weights after one more line: argmax over d of (n+1)·w_d/W − lines_d, where
// n and W are the lines and weights of the active datasets. This largest-
// deficit rule keeps every dataset within one line of its share.
//
// Under a schedule the share is that of the weights summed over the steps
// since the mixture's last change (share), so each dataset stays within one
// line of the schedule integrated over the steps; a dataset whose weight is
// 0 at this step is left out.
func (r *Rank) pickDataset() *rankDataset {
	target := r.weights
	if r.share != nil {
		target = r.share.target
	}
	var n uint64
	var sum float64
	for i, d := range r.datasets {
		if len(d.active) > 0 && r.weights[i] > 0 {
			n += d.lines
			sum += target[i]
		}
	}
	var best *rankDataset
	var bestScore float64
	for i, d := range r.datasets {
		if len(d.active) == 0 || r.weights[i] <= 0 {
			continue
		}
		score := float64(n+1)*target[i]/sum - float64(d.lines)
		if best == nil || score > bestScore {
			best, bestScore = d, score
		}
	}
	return best
}
