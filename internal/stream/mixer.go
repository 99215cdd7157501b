package stream

import (
	"context"
	"fmt"
	"slices"

	"github.com/dataloaderd/dataloaderd/internal/state"
)

// mixer decides which dataset each line of a rank comes from, and owns what
// that rests on: the weights in effect (the config's, a schedule's at each
// step, or a change made at run time), a schedule's integral (shareSum),
// the lines each dataset served since those weights took effect, and the
// rank's one mixture log, its history (the last entry in effect) followed
// by the changes queued for later batches.
//
// The rank asks it which dataset comes next (pick) and tells it what was
// served; a pipeline asks it for the log that a state after a step holds
// (logAt). The log changes only when the mixer is made and in set; begin,
// which puts queued changes in effect as the producer reaches them, only
// reads it, so a pipeline may read the log under its own lock while its
// producer makes a batch.
type mixer struct {
	names []string // the datasets, in config order: errors name them
	// log is the mixture log: its last `waiting` entries are queued (not
	// in effect yet); the entry before them is in effect. Its history is
	// trimmed (state.TrimMixture) at the oldest step whose state may still
	// be asked, so it holds what a state after any later step holds.
	log     []state.MixChange
	waiting int
	// weights are those of the batch being made; under a schedule share
	// sums the schedule's shares since the log's last change (see pick).
	weights []float64
	share   *shareSum
	// lines counts each dataset's lines since the weights took effect;
	// live says which datasets have lines left on the rank.
	lines []uint64
	live  []bool
}

// newMixer sets up the mixing of a rank resumed after step (0: a rank from
// the beginning) of a world of dpSize ranks, from the restored state (nil:
// none), whose log it checks: the log's history, the changes queued for
// later batches, the weights or schedule in effect, and, under a schedule,
// the shares summed since the log's last change. It reports whether the
// mixing counts restart at step (reweigh): the rank then rebases its shards.
// The counts start at 0 with every dataset live (start sets them).
func newMixer(ctx context.Context, cfg Config, names []string, step uint64, dpSize uint32, from *state.Restored) (m *mixer, reweigh bool, err error) {
	if from != nil {
		if err := state.CheckMixture("restored ", from.Mixture, names); err != nil {
			return nil, false, err
		}
	}
	m = &mixer{names: names, lines: make([]uint64, len(names)), live: make([]bool, len(names))}
	// The configured mixture from step on, as the log records it.
	configured := state.MixChange{Step: step, Weights: make([]float64, len(cfg.Datasets))}
	for i, d := range cfg.Datasets {
		configured.Weights[i] = d.Weight
	}
	if len(cfg.Schedule) > 0 {
		configured.Weights = state.ScheduleWeights(cfg.Schedule, step+1, nil)
		configured.Schedule = cfg.Schedule
	}
	if from == nil || len(from.Mixture) == 0 { // the second: saved before the mixture log
		m.log = []state.MixChange{configured}
	} else if reweigh, err = m.resume(from, step, dpSize, configured); err != nil {
		return nil, false, err
	}
	return m, reweigh, m.inEffect(ctx, step)
}

// resume takes a saved log: its history (the entry in effect last) and its
// queued changes. A resume whose configured weights (or schedule) differ
// from those the saved run was configured with, or whose saved ranks
// disagree, is a change of weights at the resumed step, over the changes
// made at run time (queued ones included): mixing counts restart there.
// Otherwise the saved log's entry in effect stays in effect (a change made
// at run time included) and its queued changes stay queued.
func (m *mixer) resume(from *state.Restored, step uint64, dpSize uint32, configured state.MixChange) (reweigh bool, err error) {
	history, queued, err := state.SplitMixture("restored ", from.Mixture, step)
	if err != nil {
		return false, err
	}
	if len(history) == 0 {
		return false, fmt.Errorf("%w: the restored mixture log has no entry at or before step %d, only changes queued after it",
			state.ErrMismatch, step)
	}
	log := state.CloneMixture(history)
	last := log[len(log)-1]
	switch {
	case from.MixturesDiffer || !state.SameMixture(state.LastConfigured(log), configured):
		m.log = state.TrimMixture(append(log, configured), step)
		return true, nil
	case len(last.Schedule) > 0 && from.FromSize != dpSize:
		// Under a schedule a resume on another world size restarts the
		// counts: the rule follows the schedule integrated over the steps
		// of this rank's lines, and a rescale changes the lines a step.
		last.Step = step
		log = state.TrimMixture(append(log, last), step)
		reweigh = true
	default:
		// A change made at run time for the batch after the saved step:
		// its counts restart with that batch (again, if they did).
		reweigh = last.Step == step && step > 0
	}
	m.log, m.waiting = append(log, state.CloneMixture(queued)...), len(queued)
	return reweigh, nil
}

// inEffect sets the weights of the log's entry in effect at step and, under
// a schedule, sums its shares since that entry up to step, as the
// uninterrupted run summed them.
func (m *mixer) inEffect(ctx context.Context, step uint64) error {
	current := m.log[len(m.log)-1-m.waiting]
	m.weights = slices.Clone(current.Weights)
	schedule := current.Schedule
	if len(schedule) == 0 {
		return nil
	}
	if n := rampSteps(schedule, current.Step, step); n > maxScheduleReplay {
		return fmt.Errorf("%w: a schedule resumed at step %d has %d steps of ramps since the mixture's last change at step %d to sum (at most %d)",
			state.ErrMismatch, step, n, current.Step, maxScheduleReplay)
	}
	m.share = newShareSum(schedule, current.Step)
	if err := m.share.advance(ctx, step); err != nil {
		return fmt.Errorf("summing the schedule's shares up to the restored step %d: %w", step, err)
	}
	m.weights = state.ScheduleWeights(schedule, step+1, nil)
	return nil
}

// start sets the lines dataset d served since the weights took effect, and
// whether it has lines left on the rank.
func (m *mixer) start(d int, lines uint64, live bool) { m.lines[d], m.live[d] = lines, live }

// served counts a line of dataset d.
func (m *mixer) served(d int) { m.lines[d]++ }

// drained marks dataset d as having no line left on the rank.
func (m *mixer) drained(d int) { m.live[d] = false }

// begin readies the mixer for the batch after step: the changes queued for
// it take effect, and a schedule moves on to its weights. It reports
// whether the mixing counts restarted: the rank then rebases its shards.
func (m *mixer) begin(step uint64) (restart bool) {
	for m.waiting > 0 && m.log[len(m.log)-m.waiting].Step == step {
		m.waiting--
		m.takeEffect(m.log[len(m.log)-1-m.waiting].Weights)
		restart = true
	}
	if m.share != nil && m.share.at == step {
		_ = m.share.advance(context.Background(), step+1) // one step: never stopped
		m.weights = m.share.weights
	}
	return restart
}

// takeEffect puts weights in effect, set at run time: the schedule (if any)
// is replaced and the counts restart.
func (m *mixer) takeEffect(weights []float64) {
	m.share = nil
	m.weights = slices.Clone(weights)
	clear(m.lines)
}

// batchWeights are the weights of the batch being made, for its
// description; under a schedule a copy, since the schedule rewrites them at
// every step.
func (m *mixer) batchWeights() []float64 {
	if m.share != nil {
		return slices.Clone(m.weights)
	}
	return m.weights
}

// pick returns the live dataset furthest behind its share of the weights
// after one more line (-1: none is live): argmax over d of
// (n+1)·w_d/W − lines_d, where n and W are the lines and weights of the
// live datasets. This largest-deficit rule keeps every dataset within one
// line of its share.
//
// Under a schedule the share is that of the weights summed over the steps
// since the mixture's last change (share), so each dataset stays within one
// line of the schedule integrated over the steps; a dataset whose weight is
// 0 at this step is left out.
func (m *mixer) pick() int {
	target := m.weights
	if m.share != nil {
		target = m.share.target
	}
	var n uint64
	var sum float64
	for i, live := range m.live {
		if live && m.weights[i] > 0 {
			n += m.lines[i]
			sum += target[i]
		}
	}
	best := -1
	var bestScore float64
	for i, live := range m.live {
		if !live || m.weights[i] <= 0 {
			continue
		}
		score := float64(n+1)*target[i]/sum - float64(m.lines[i])
		if best < 0 || score > bestScore {
			best, bestScore = i, score
		}
	}
	return best
}

// set changes the weights from the batch after `after` on (after >= step,
// the rank's step): they replace the configured weights or schedule, the
// change is logged as made at run time, and when after is step it takes
// effect at once (restart: the mixing counts restart, and the rank rebases
// its shards). It replaces the changes logged at run time for that batch
// and later ones: the newest call wins for the steps after its own. floor
// is the oldest step whose state may still be asked (a pipeline's released
// step, a rank's own step): the changes a state after it would queue are
// bounded (checkQueue), and the log's history is trimmed there.
func (m *mixer) set(step, floor, after uint64, weights []float64) (restart bool, err error) {
	if after < step {
		return false, fmt.Errorf("%w: weights for the batches after step %d, but the rank has produced step %d", ErrStep, after, step)
	}
	if err := state.CheckWeights(weights, m.names, true); err != nil {
		return false, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if err := m.checkQueue(floor, after); err != nil {
		return false, err
	}
	// Every entry dropped is for a step >= after > step, or after == step:
	// queued, in either case, at the log's end.
	keep := m.log[:0]
	for _, mc := range m.log {
		if mc.Step < after || mc.Step == after && !mc.Runtime {
			keep = append(keep, mc)
		}
	}
	m.waiting -= len(m.log) - len(keep)
	m.log = append(keep, state.MixChange{Step: after, Weights: slices.Clone(weights), Runtime: true})
	m.waiting++
	if after == step {
		m.waiting = 0
		m.takeEffect(weights)
	}
	m.log = state.TrimMixture(m.log, floor)
	return after == step, nil
}

// checkQueue refuses a change of weights for the batches after `after` when
// the state after step floor would queue, with it, more than
// state.MaxQueued changes: when the log holds that many for steps after
// floor and before `after` (those from `after` on the change replaces). It
// is the one count of the bound: a rank alone asks it at its own step, a
// pipeline at the last step its consumers released, which is what the
// state saved after the last consumed batch queues (its rank may have
// produced, and taken changes in effect, ahead of that).
func (m *mixer) checkQueue(floor, after uint64) error {
	n := 0
	for _, mc := range m.log {
		if mc.Step > floor && mc.Step < after {
			n++
		}
	}
	if n >= state.MaxQueued {
		return fmt.Errorf("%w: weights for the batches after step %d: %d changes of weights are queued for earlier batches, and at most %d may wait (state.MaxQueued); ask again once some took effect",
			ErrStep, after, n, state.MaxQueued)
	}
	return nil
}

// changedAt returns the weights of the change made at run time for the
// batches after step after, if the log holds one.
func (m *mixer) changedAt(after uint64) ([]float64, bool) {
	for _, mc := range m.log {
		if mc.Step == after && mc.Runtime {
			return mc.Weights, true
		}
	}
	return nil, false
}

// logAt is the mixture log of the state after step (at or after the floor
// of the last set): its history at step, bounded, and its queue. A copy.
func (m *mixer) logAt(step uint64) []state.MixChange {
	return state.CloneMixture(state.TrimMixture(m.log, step))
}
