// Package state is the loader state model: per logical shard a cursor into the
// shard's token stream, per rank the shards it owns, and the versioned file a
// rank saves into a checkpoint folder. The state holds no token data, so it is
// kilobytes whatever the corpus, the buffers or the number of steps.
//
// Everything else a rank needs (dataset counters for mixing, which shard comes
// next, which lines of a shuffle window were served) is derived from these
// cursors, so restoring them onto any world size restores the stream exactly.
package state

import (
	"errors"
	"fmt"
	"math"
)

// Version is the version of the state file format this package writes.
// Version 1 files (no mixing bases, no mixture log) are still read.
const Version = 2

// ErrMismatch marks a saved state that does not belong to the current corpus
// and config, or a set of state files that does not cover every shard once.
var ErrMismatch = errors.New("state does not match")

// Cursor is a position in a shard's token stream: the unit at position Pos of
// epoch Epoch's permutation, Offset tokens into it (separators included).
type Cursor struct {
	Epoch  uint64
	Pos    uint64
	Offset uint64
}

// Less orders cursors by stream position.
func (c Cursor) Less(o Cursor) bool {
	if c.Epoch != o.Epoch {
		return c.Epoch < o.Epoch
	}
	if c.Pos != o.Pos {
		return c.Pos < o.Pos
	}
	return c.Offset < o.Offset
}

// Shard is the state of one logical shard: Lines lines of its stream have been
// served in all; the current line-shuffle window starts at Window and Taken of
// its lines are out (which ones follows from the window's keyed order). Base
// is Lines when the mixing weights in effect took effect: mixing counts the
// lines served since then, so a change of weights steers the lines after it
// and does not try to repay the past.
type Shard struct {
	Lines  uint64
	Window Cursor
	Taken  uint64
	Base   uint64
}

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

// CheckMixture checks a mixture log read from a state against the number of
// datasets: every weight vector of that length, of finite weights >= 0,
// schedules in increasing step order. where names the log in errors.
func CheckMixture(where string, m []MixChange, datasets int) error {
	ok := func(ws []float64) bool {
		if len(ws) != datasets {
			return false
		}
		for _, w := range ws {
			if !(w >= 0) || math.IsInf(w, 1) {
				return false
			}
		}
		return true
	}
	for i, c := range m {
		if !ok(c.Weights) {
			return fmt.Errorf("%w: %smixture[%d] has weights %v, want %d finite weights >= 0", ErrMismatch, where, i, c.Weights, datasets)
		}
		for j, p := range c.Schedule {
			if !ok(p.Weights) || j > 0 && p.Step <= c.Schedule[j-1].Step {
				return fmt.Errorf("%w: %smixture[%d] schedule point %d (step %d, weights %v) is out of order or not %d finite weights >= 0",
					ErrMismatch, where, i, j, p.Step, p.Weights, datasets)
			}
		}
	}
	return nil
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

// MaxMixLog bounds the mixture log a state keeps (the oldest entries go
// first), so the state never grows with the number of changes.
const MaxMixLog = 64

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

// ShardID names a logical shard: the dataset's index in the config and the
// shard's index within the dataset.
type ShardID struct {
	Dataset int
	Shard   uint32
}

func (id ShardID) String() string { return fmt.Sprintf("dataset %d shard %d", id.Dataset, id.Shard) }

// Owned returns the logical shards [lo, hi) that data-parallel rank r of w owns
// in every dataset: contiguous blocks, as even as the division allows.
func Owned(r, w, shards uint32) (lo, hi uint32) {
	lo = uint32(uint64(r) * uint64(shards) / uint64(w))
	hi = uint32(uint64(r+1) * uint64(shards) / uint64(w))
	return lo, hi
}

// Rank is the state of one data-parallel rank after its client consumed
// batch Step: the cursors of the shards it owns, in every dataset.
type Rank struct {
	DPRank uint32
	DPSize uint32
	Step   uint64
	// Shards holds the owned shards of every dataset.
	Shards map[ShardID]Shard
	// Mixture is the log of mixing weights, oldest first; its last entry is
	// in effect. Empty in states read from version 1 files.
	Mixture []MixChange
}

// Clone returns a deep copy.
func (r Rank) Clone() Rank {
	c := r
	c.Shards = make(map[ShardID]Shard, len(r.Shards))
	for k, v := range r.Shards {
		c.Shards[k] = v
	}
	c.Mixture = CloneMixture(r.Mixture)
	return c
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
