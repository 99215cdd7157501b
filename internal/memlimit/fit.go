package memlimit

import (
	"errors"
	"fmt"
	"strings"
)

// ErrOverLimit marks budgets that cannot fit the memory limit.
var ErrOverLimit = errors.New("memory budgets over the limit")

// Budget is one of the daemon's memory budgets as Fit weighs it: memory the
// daemon may come to hold in full (rings, caches), charged to its cgroup.
type Budget struct {
	// Flag names the setting in messages ("--ring-budget-mb").
	Flag string
	// Bytes is the budget.
	Bytes int64
	// Default marks a value the operator did not choose (the flag's
	// default, or one derived from the machine): Fit may lower it.
	Default bool
	// Min is the least Fit lowers it to.
	Min int64
}

// Fit fits the budgets and the daemon's own reserve (memory it needs
// beside them: the Go runtime, requests, sessions' bookkeeping, a state
// being read) within the limit, and returns the budgets as they are to be
// used, with a line for each one it lowered.
//
// The rule: a budget the operator set is never changed. When those set,
// with the reserve, exceed the limit, Fit refuses, naming each of them and
// the limit: the daemon was asked for memory the kernel will not give, and
// starting anyway is the OOM kill of every session on the node, later and
// with no word of why (issue 23: legal 256 MiB sessions in a 1 GiB cgroup,
// killed 4 runs of 4); shrinking a value the operator chose would hide the
// mistake until rings are refused or caches thrash. Budgets left at their
// defaults are guesses made for a whole machine, and the limit is better
// knowledge: they share what the limit leaves in proportion to their
// defaults (none below its Min), and each one lowered is reported so that
// the daemon logs it. No limit (0) changes nothing.
func Fit(limit Limit, reserve int64, reserveFlag string, budgets []Budget) ([]Budget, []string, error) {
	out := append([]Budget(nil), budgets...)
	if limit.Bytes <= 0 {
		return out, nil, nil
	}
	avail := limit.Bytes - reserve
	if avail <= 0 {
		return nil, nil, fmt.Errorf("%w: the daemon's reserve of %s (%s) leaves nothing of %s for rings and caches",
			ErrOverLimit, MiB(reserve), reserveFlag, limit)
	}
	var set, defaults int64
	var named []string
	for _, b := range out {
		if b.Default {
			defaults += b.Bytes
			continue
		}
		set += b.Bytes
		named = append(named, fmt.Sprintf("%s %s", b.Flag, MiB(b.Bytes)))
	}
	if set > avail {
		return nil, nil, fmt.Errorf("%w: %s and the daemon's reserve of %s (%s) need %s, more than %s; lower them, or raise the limit",
			ErrOverLimit, list(named), MiB(reserve), reserveFlag, MiB(set+reserve), limit)
	}
	rest := avail - set
	if defaults <= rest {
		return out, nil, nil
	}
	var lowered []string
	var total int64
	for i, b := range out {
		if !b.Default {
			continue
		}
		// Scaled in float: the product of two byte counts can pass 2^63.
		n := int64(float64(b.Bytes) * float64(rest) / float64(defaults))
		n = max(n&^(1<<20-1), b.Min) // whole MiB
		if n < b.Bytes {
			lowered = append(lowered, fmt.Sprintf("%s lowered from its default of %s to %s to fit %s with the daemon's reserve of %s (%s)",
				b.Flag, MiB(b.Bytes), MiB(n), limit, MiB(reserve), reserveFlag))
			out[i].Bytes = n
		}
		total += out[i].Bytes
	}
	if total > rest {
		return nil, nil, fmt.Errorf("%w: %s leaves %s for the budgets left at their defaults, less than their least; set them lower, or raise the limit",
			ErrOverLimit, limit, MiB(rest))
	}
	return out, lowered, nil
}

// list joins items as "a, b and c".
func list(items []string) string {
	switch len(items) {
	case 0:
		return "no budget set"
	case 1:
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}
