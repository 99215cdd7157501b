package stream

import (
	"context"
	"math"

	"github.com/dataloaderd/dataloaderd/internal/state"
)

// maxScheduleReplay bounds the steps of linear segments (ramps) a resumed
// rank sums one by one to reach its step under a schedule: 2^26 steps, about
// 2 s of a core with three datasets (29 ns a step; the replay scanned the
// points and took 463 ns a step before), far more than any run's ramps.
// Constant segments cost one product each, whatever their length. A resume
// past the bound is refused.
const maxScheduleReplay = 1 << 26

// replayCheck is how many steps of a ramp a replay sums between two looks at
// its context.
const replayCheck = 1 << 16

// shareSum integrates a schedule's shares: for each dataset, the sum over
// batches (base, at] of its weight over the sum of the weights at that
// batch. pickDataset keeps each dataset within a line of it.
//
// The sum is a function of (schedule, base, at) alone, whichever steps it
// was reached by: the schedule is cut into segments between its points; a
// constant segment adds count x share in one product, a linear one (a ramp)
// adds its steps' shares one by one from the segment's start, and a
// segment's sum joins the total of those before it when the next segment
// begins. So a rank resumed at a step sums to it in O(points + ramp steps),
// then reaches every later step by the operations the rank that never
// stopped made, and their batches are the same bit for bit.
type shareSum struct {
	points []state.SchedulePoint
	at     uint64 // the last step summed
	// seg is the segment holding the step after at's segment began: segment
	// i holds steps [points[i-1].Step, points[i].Step) (from 0, to the end).
	seg  int
	from uint64 // the first step summed in seg
	// done sums the segments before seg, part seg's steps so far; target
	// is their sum, what pickDataset steers to.
	done, part, target []float64
	weights            []float64 // the weights of step at
	unit               []float64 // a constant segment's share of one step
	// perStep counts the steps summed one by one (ramps), for tests.
	perStep uint64
}

// newShareSum starts the sum of a schedule's shares after step base.
func newShareSum(points []state.SchedulePoint, base uint64) *shareSum {
	n := len(points[0].Weights)
	s := &shareSum{points: points, at: base, from: base + 1,
		done: make([]float64, n), part: make([]float64, n), target: make([]float64, n),
		weights: make([]float64, n), unit: make([]float64, n)}
	for s.seg < len(points) && points[s.seg].Step <= base+1 {
		s.seg++
	}
	s.enter()
	return s
}

// end is the first step after segment i.
func (s *shareSum) end(i int) uint64 {
	if i < len(s.points) {
		return s.points[i].Step
	}
	return math.MaxUint64
}

// linear says whether segment i is a ramp to its point.
func (s *shareSum) linear(i int) bool { return i > 0 && i < len(s.points) && s.points[i].Linear }

// enter sets up segment seg: a constant one's weights and share of a step.
func (s *shareSum) enter() {
	if s.linear(s.seg) {
		return
	}
	w := s.points[max(s.seg-1, 0)].Weights
	copy(s.weights, w)
	var sum float64
	for _, x := range w {
		sum += x
	}
	for d, x := range w {
		s.unit[d] = x / sum
	}
}

// rampStep adds the shares of step (in the ramp seg) and sets its weights,
// as state.ScheduleWeights computes them.
func (s *shareSum) rampStep(step uint64) {
	a, b := s.points[s.seg-1], s.points[s.seg]
	f := float64(step-a.Step) / float64(b.Step-a.Step)
	var sum float64
	for d := range a.Weights {
		s.weights[d] = a.Weights[d] + (b.Weights[d]-a.Weights[d])*f
		sum += s.weights[d]
	}
	for d, w := range s.weights {
		s.part[d] += w / sum
	}
	s.perStep++
}

// advance sums the steps up to t; a replay of a long ramp stops with ctx.
func (s *shareSum) advance(ctx context.Context, t uint64) error {
	for s.at < t {
		next := s.at + 1
		if next >= s.end(s.seg) {
			for d := range s.done {
				s.done[d] += s.part[d]
				s.part[d] = 0
			}
			s.seg++
			s.from = next
			s.enter()
		}
		if s.linear(s.seg) {
			s.rampStep(next)
			s.at = next
			if s.perStep%replayCheck == 0 && ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		last := min(t, s.end(s.seg)-1)
		k := float64(last - s.from + 1)
		for d, u := range s.unit {
			s.part[d] = k * u
		}
		s.at = last
	}
	for d := range s.target {
		s.target[d] = s.done[d] + s.part[d]
	}
	return nil
}

// rampSteps counts the steps in (base, at] that lie in ramps: what a
// shareSum from base sums one by one to reach at.
func rampSteps(points []state.SchedulePoint, base, at uint64) uint64 {
	var n uint64
	for i := 1; i < len(points); i++ {
		if !points[i].Linear {
			continue
		}
		lo, hi := max(points[i-1].Step, base+1), min(points[i].Step-1, at)
		if lo <= hi {
			n += hi - lo + 1
		}
	}
	return n
}
