package state

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Bounds of a mixture log, so that a state stays small whatever the number
// of changes made to the mixture.
const (
	// MaxMixLog bounds the history a log keeps: its entries at or before
	// the state's step. The oldest go first; the entry in effect, the last
	// configured one and the queued ones are never dropped (TrimMixture).
	MaxMixLog = 64
	// MaxQueued bounds the changes of weights queued for later batches
	// (set_weights for a step the rank has not reached): one more is
	// refused until some of them took effect.
	MaxQueued = 256
	// MaxWeightSum bounds the sum of a vector of weights. Weights are
	// relative (3:1 mixes as 6:2); mixing multiplies them by counts of
	// lines, and a sum that overflows to infinity would starve datasets.
	MaxWeightSum = 1e100
)

// MixChange is one entry of the log of mixing weights: from the batch after
// Step on, the datasets were mixed by Weights (config order), or, when
// Schedule is set, by the schedule (Weights then holds its weights at the
// batch after Step).
type MixChange struct {
	Step     uint64          `json:"step"`
	Weights  []float64       `json:"weights"`
	Schedule []SchedulePoint `json:"schedule,omitempty"`
	// Runtime marks a change made while the job ran (set_weights), not by
	// its config.
	Runtime bool `json:"runtime,omitempty"`
}

// SchedulePoint is a point of a mixture schedule: from batch Step on the
// weights are Weights (config order); with Linear they are reached at Step
// along a straight line from the point before.
type SchedulePoint struct {
	Step    uint64    `json:"step"`
	Weights []float64 `json:"weights"`
	Linear  bool      `json:"linear,omitempty"`
}

// ScheduleWeights returns the weights of batch step under a schedule (points
// in increasing step order, at least one), into dst.
func ScheduleWeights(points []SchedulePoint, step uint64, dst []float64) []float64 {
	dst = dst[:0]
	i := 0
	for i < len(points) && points[i].Step <= step {
		i++
	}
	switch {
	case i == 0:
		return append(dst, points[0].Weights...)
	case i == len(points) || !points[i].Linear:
		return append(dst, points[i-1].Weights...)
	}
	a, b := points[i-1], points[i]
	f := float64(step-a.Step) / float64(b.Step-a.Step)
	for d := range a.Weights {
		dst = append(dst, a.Weights[d]+(b.Weights[d]-a.Weights[d])*f)
	}
	return dst
}

// CheckWeights checks a vector of mixing weights in dataset order, wherever
// it comes from: the datasets of a config, a point of its schedule, a
// change at run time (set_weights), an entry or a schedule point of a
// restored mixture log. It must hold a weight for each dataset of names
// (which label them in errors), each a finite number >= 0, summing to at
// most MaxWeightSum (1e308 and 1e308 sum to +Inf, which would starve a
// dataset), and, with mixes, one at least positive: weights that mix lines
// with none positive mix nothing, and a rank under them would report the
// end of its data with lines left. Only a config's datasets' weights under
// a schedule mix nothing (the schedule's do) and may all be 0.
func CheckWeights(ws []float64, names []string, mixes bool) error {
	if len(ws) != len(names) {
		return fmt.Errorf("%d weights for %d datasets", len(ws), len(names))
	}
	var sum float64
	some := false
	for d, w := range ws {
		if math.IsNaN(w) || math.IsInf(w, 0) || w < 0 {
			return fmt.Errorf("dataset %q: weight must be a finite number >= 0, got %v", names[d], w)
		}
		sum += w
		some = some || w > 0
	}
	if !(sum <= MaxWeightSum) {
		named := make([]string, len(ws))
		for d, w := range ws {
			named[d] = fmt.Sprintf("%q %g", names[d], w)
		}
		return fmt.Errorf("weights %s: the weights sum to %g, more than %g: weights are relative (3:1 mixes as 6:2), so scale them down",
			strings.Join(named, ", "), sum, MaxWeightSum)
	}
	if mixes && !some {
		return errors.New("every weight is zero; at least one must be positive")
	}
	return nil
}

// CheckMixture checks a mixture log read from a state against the datasets
// (names, in the order of the log's weights): every entry's weights and
// every point of its schedule pass CheckWeights (one at least positive:
// every vector of a log mixes), schedules are in increasing step order,
// entries in step order, and no more than the bounds keep. where names the
// log in errors, which name the entry, its step and its weights.
func CheckMixture(where string, m []MixChange, names []string) error {
	if err := mixtureProblem(m, names); err != nil {
		return fmt.Errorf("%w: %s%v", ErrMismatch, where, err)
	}
	return nil
}

// mixtureProblem is what CheckMixture finds wrong with a log, unlabelled.
func mixtureProblem(m []MixChange, names []string) error {
	if len(m) > MaxMixLog+MaxQueued {
		return fmt.Errorf("mixture log has %d entries, more than the %d of history and %d queued a state keeps",
			len(m), MaxMixLog, MaxQueued)
	}
	for i, c := range m {
		if err := CheckWeights(c.Weights, names, true); err != nil {
			return fmt.Errorf("mixture[%d] (step %d) weights %v: %v", i, c.Step, c.Weights, err)
		}
		if i > 0 && c.Step < m[i-1].Step {
			return fmt.Errorf("mixture[%d] is at step %d, before the entry before it (step %d)", i, c.Step, m[i-1].Step)
		}
		for j, p := range c.Schedule {
			if j > 0 && p.Step <= c.Schedule[j-1].Step {
				return fmt.Errorf("mixture[%d] schedule point %d is at step %d, not after the point before it (step %d)",
					i, j, p.Step, c.Schedule[j-1].Step)
			}
			if err := CheckWeights(p.Weights, names, true); err != nil {
				return fmt.Errorf("mixture[%d] schedule point %d (step %d) weights %v: %v", i, j, p.Step, p.Weights, err)
			}
		}
	}
	return nil
}

// queuedFrom is the index of a log's first entry after step: the entries
// from it on are queued (the log is in step order).
func queuedFrom(m []MixChange, step uint64) int {
	i := len(m)
	for i > 0 && m[i-1].Step > step {
		i--
	}
	return i
}

// Queued returns the changes of a state's log queued for the batches after
// step (a subslice of m).
func Queued(m []MixChange, step uint64) []MixChange { return m[queuedFrom(m, step):] }

// SplitMixture splits the log of a state at step into its history (at or
// before step; the last entry is in effect) and its queued changes, and
// checks the queue: changes made at run time, for increasing steps, at
// most MaxQueued. where names the log in errors.
func SplitMixture(where string, m []MixChange, step uint64) (history, queued []MixChange, err error) {
	i := queuedFrom(m, step)
	history, queued = m[:i], m[i:]
	if len(queued) > MaxQueued {
		return nil, nil, fmt.Errorf("%w: %smixture log queues %d changes after step %d, more than %d (state.MaxQueued)",
			ErrMismatch, where, len(queued), step, MaxQueued)
	}
	for k, q := range queued {
		if !q.Runtime || len(q.Schedule) > 0 || k > 0 && q.Step == queued[k-1].Step {
			return nil, nil, fmt.Errorf("%w: %smixture log entry at step %d is after step %d but not a change of weights made at run time (only those are queued, one a step)",
				ErrMismatch, where, q.Step, step)
		}
	}
	return history, queued, nil
}

// TrimMixture bounds a log at step to MaxMixLog entries of history,
// dropping the oldest: the entry in effect at step, every queued one, and
// the last configured one (LastConfigured: a resume compares its config
// with it) stay.
func TrimMixture(m []MixChange, step uint64) []MixChange {
	n := queuedFrom(m, step)
	if n <= MaxMixLog {
		return m
	}
	cut := n - MaxMixLog
	c := lastConfigured(m[:n])
	if c >= cut {
		return m[cut:]
	}
	return append([]MixChange{m[c]}, m[cut+1:]...)
}

// LastConfigured is the last entry of a log's history that came from a job
// config (not from a change at run time), or its first entry.
func LastConfigured(history []MixChange) MixChange { return history[lastConfigured(history)] }

func lastConfigured(m []MixChange) int {
	for i := len(m) - 1; i > 0; i-- {
		if !m[i].Runtime {
			return i
		}
	}
	return 0
}

// SameMixture reports whether two log entries mix alike: the same schedule
// (point for point, weights up to a factor), or without one the same weights.
func SameMixture(a, b MixChange) bool {
	if len(a.Schedule) != len(b.Schedule) {
		return false
	}
	if len(a.Schedule) == 0 {
		return SameWeights(a.Weights, b.Weights)
	}
	for i := range a.Schedule {
		p, q := a.Schedule[i], b.Schedule[i]
		if p.Step != q.Step || p.Linear != q.Linear || !SameWeights(p.Weights, q.Weights) {
			return false
		}
	}
	return true
}

// SameWeights reports whether two weight vectors give the same mixture: equal
// up to a positive factor (3:1 is 6:2).
func SameWeights(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	var sa, sb float64
	for i := range a {
		sa += a[i]
		sb += b[i]
	}
	if sa <= 0 || sb <= 0 {
		return sa == sb
	}
	for i := range a {
		if d := a[i]/sa - b[i]/sb; d > 1e-12 || d < -1e-12 {
			return false
		}
	}
	return true
}

// CloneMixture returns a deep copy of a mixture log.
func CloneMixture(m []MixChange) []MixChange {
	if m == nil {
		return nil
	}
	out := make([]MixChange, len(m))
	for i, c := range m {
		out[i] = MixChange{Step: c.Step, Weights: append([]float64(nil), c.Weights...), Runtime: c.Runtime}
		for _, p := range c.Schedule {
			p.Weights = append([]float64(nil), p.Weights...)
			out[i].Schedule = append(out[i].Schedule, p)
		}
	}
	return out
}
