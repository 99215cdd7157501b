package state

import (
	"fmt"
	"slices"
	"strings"
)

// Bounds of a skip log, so that a state stays small whatever the number of
// ranges skipped in a run.
const (
	// MaxSkipLog bounds the ranges a log keeps that are passed (their last
	// step at or before the state's step): the oldest go first (TrimSkips).
	MaxSkipLog = 64
	// MaxSkipsPending bounds the ranges not reached yet; one more is
	// refused until the rank passed some of them.
	MaxSkipsPending = 256
	// MaxSkipRange bounds the steps of one range: the producer passes a
	// range before it makes the batch after it, by counting lines (or
	// batch by batch for text), and a range far past any spike's would
	// hold it for long. A longer skip is a resume at a later step.
	MaxSkipRange = 1 << 20
	// MaxSkipStep bounds a range's last step: far beyond any run, and far
	// enough below 2^64 that the step after it does not wrap.
	MaxSkipStep = 1 << 48
)

// SkipRange is a range of data steps whose batches are made and dropped,
// never served: the batch after step First-1 is batch Last+1. A batch keeps
// its data step, so the steps after a range are the batches an unskipped
// run serves at those steps.
type SkipRange struct {
	First uint64 `json:"first"`
	Last  uint64 `json:"last"`
}

func (s SkipRange) String() string { return fmt.Sprintf("steps %d to %d", s.First, s.Last) }

// Steps is the number of steps in the range.
func (s SkipRange) Steps() uint64 { return s.Last - s.First + 1 }

// Contains reports whether step lies in the range.
func (s SkipRange) Contains(step uint64) bool { return s.First <= step && step <= s.Last }

// CheckSkips checks a list of skip ranges, wherever it comes from (a
// config's skip_steps, a state's log): each range from step 1 on, First <=
// Last, the ranges in step order and apart, at most max of them. field
// names the list in errors, which name the range and its index.
func CheckSkips(field string, skips []SkipRange, most int) error {
	if len(skips) > most {
		return fmt.Errorf("%s holds %d ranges, more than the %d a state keeps", field, len(skips), most)
	}
	for i, s := range skips {
		switch {
		case s.First == 0:
			return fmt.Errorf("%s[%d] [%d, %d]: steps count from 1", field, i, s.First, s.Last)
		case s.First > s.Last:
			return fmt.Errorf("%s[%d] [%d, %d]: the first step is after the last", field, i, s.First, s.Last)
		case s.Last > MaxSkipStep:
			return fmt.Errorf("%s[%d] [%d, %d]: steps must be at most %d (state.MaxSkipStep)", field, i, s.First, s.Last, uint64(MaxSkipStep))
		case s.Steps() > MaxSkipRange:
			return fmt.Errorf("%s[%d] [%d, %d] is %d steps, more than the %d a range may skip (state.MaxSkipRange): resume from a later step instead",
				field, i, s.First, s.Last, s.Steps(), MaxSkipRange)
		case i > 0 && s.First <= skips[i-1].Last:
			return fmt.Errorf("%s[%d] [%d, %d] starts at or before the end of the range before it [%d, %d]: ranges must be in step order and must not overlap",
				field, i, s.First, s.Last, skips[i-1].First, skips[i-1].Last)
		}
	}
	return nil
}

// checkSkipLog checks the skip log of a state after step: CheckSkips, and
// no more than the bounds keep passed and pending.
func checkSkipLog(skips []SkipRange, step uint64) error {
	if err := CheckSkips("skips", skips, MaxSkipLog+MaxSkipsPending); err != nil {
		return err
	}
	if n := len(PendingSkips(skips, step)); n > MaxSkipsPending {
		return fmt.Errorf("skips: %d ranges after step %d, more than %d (state.MaxSkipsPending)", n, step, MaxSkipsPending)
	}
	return nil
}

// PendingSkips returns the ranges of a log that a rank after step has not
// passed: those whose last step is after it (a subslice).
func PendingSkips(skips []SkipRange, step uint64) []SkipRange {
	i := len(skips)
	for i > 0 && skips[i-1].Last > step {
		i--
	}
	return skips[i:]
}

// NextStep is the data step of the batch served after step under a log:
// step+1, or past the ranges that hold it.
func NextStep(skips []SkipRange, step uint64) uint64 {
	next := step + 1
	for _, s := range skips {
		if s.Contains(next) {
			next = s.Last + 1
		}
	}
	return next
}

// Skipped reports the range of a log that holds step, if one does.
func Skipped(skips []SkipRange, step uint64) (SkipRange, bool) {
	for _, s := range skips {
		if s.Contains(step) {
			return s, true
		}
	}
	return SkipRange{}, false
}

// TrimSkips bounds a log at step to MaxSkipLog passed ranges, dropping the
// oldest; the pending ones stay.
func TrimSkips(skips []SkipRange, step uint64) []SkipRange {
	passed := len(skips) - len(PendingSkips(skips, step))
	if passed <= MaxSkipLog {
		return skips
	}
	return skips[passed-MaxSkipLog:]
}

// AddSkip adds a range to a log (in step order): a range the log holds
// already is no change (added false); one that overlaps another is refused.
func AddSkip(skips []SkipRange, s SkipRange) (out []SkipRange, added bool, err error) {
	i := 0
	for i < len(skips) && skips[i].Last < s.First {
		i++
	}
	if i < len(skips) && skips[i] == s {
		return skips, false, nil
	}
	if i < len(skips) && skips[i].First <= s.Last {
		return skips, false, fmt.Errorf("%v overlaps %v, already logged", s, skips[i])
	}
	return slices.Insert(slices.Clone(skips), i, s), true, nil
}

// ConfigSkips adds the ranges of a config's skip_steps to the log of a
// rank resumed after step: a range wholly at or before step is history,
// logged already (no change) or not (a warning: nothing is skipped); one
// that holds step skips only the steps after it; the others are added.
// A range that overlaps a logged one without being it is refused.
func ConfigSkips(skips, config []SkipRange, step uint64) (out []SkipRange, warnings []string, err error) {
	out = skips
	for i, s := range config {
		if loggedAs(out, s) {
			continue
		}
		if s.Last <= step {
			warnings = append(warnings, fmt.Sprintf("skip_steps[%d] [%d, %d] is before the resumed step %d and the state does not log it: nothing is skipped", i, s.First, s.Last, step))
			continue
		}
		if s.First <= step {
			s.First = step + 1
		}
		if out, _, err = AddSkip(out, s); err != nil {
			return nil, nil, fmt.Errorf("skip_steps[%d] [%d, %d]: %v", i, config[i].First, config[i].Last, err)
		}
	}
	if n := len(PendingSkips(out, step)); n > MaxSkipsPending {
		return nil, nil, fmt.Errorf("skip_steps: %d ranges after the resumed step %d, more than %d (state.MaxSkipsPending)", n, step, MaxSkipsPending)
	}
	return out, warnings, nil
}

// loggedAs reports whether log holds config range s: as given, or as the
// resume that took it logged it, cut to the steps after its resumed step
// (the same last step, a later first one).
func loggedAs(log []SkipRange, s SkipRange) bool {
	return slices.ContainsFunc(log, func(m SkipRange) bool { return m.Last == s.Last && s.First <= m.First })
}

// mergeSkips merges the skip log of file name into the one merged so far
// from the files named in from (the file each range came from): a range
// both hold is one range; one only a file holds is added; two ranges that
// overlap without being equal are a conflict, refused naming both and
// their files.
func mergeSkips(merged, skips []SkipRange, from []string, name string) ([]SkipRange, []string, error) {
	for _, s := range skips {
		i := slices.IndexFunc(merged, func(m SkipRange) bool { return m.First <= s.Last && s.First <= m.Last })
		if i < 0 {
			j := slices.IndexFunc(merged, func(m SkipRange) bool { return m.First > s.First })
			if j < 0 {
				j = len(merged)
			}
			merged = slices.Insert(merged, j, s)
			from = slices.Insert(from, j, name)
			continue
		}
		if merged[i] != s {
			return nil, nil, fmt.Errorf("%w: the skip logs disagree: %s skips %v, %s skips %v; the ranks of a run skip the same steps",
				ErrMismatch, from[i], merged[i], name, s)
		}
	}
	return merged, from, nil
}

// SkipsText describes a log at step for people: each range, passed or
// pending.
func SkipsText(skips []SkipRange, step uint64) string {
	if len(skips) == 0 {
		return "none"
	}
	parts := make([]string, len(skips))
	for i, s := range skips {
		what := "skipped"
		if s.Last > step {
			what = "pending"
		}
		parts[i] = fmt.Sprintf("%d-%d (%d steps, %s)", s.First, s.Last, s.Steps(), what)
	}
	return strings.Join(parts, ", ")
}
