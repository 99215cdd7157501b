package session

import (
	"context"
	"fmt"

	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// Bounds of the skip at open (SkipToStep): a client reopening its session
// skips at most the few batches since the state it kept. A skip lays out
// the lines it passes from document lengths, at a cost that grows with
// their tokens, so it is bounded by tokens as well as by batches.
const (
	MaxSkip       = 1 << 16
	MaxSkipTokens = 1 << 30
)

// MaxSkipSteps is the most batches of batchTokens tokens a session may
// skip at open: MaxSkip, fewer for batches so large that MaxSkipTokens
// binds, and never fewer than two (a group's consumers keep their states
// one refresh apart). The client learns it from the open's reply and keeps
// the state it reopens from at most half as many batches apart.
func MaxSkipSteps(batchTokens uint64) uint64 {
	return max(2, min(MaxSkip, MaxSkipTokens/max(batchTokens, 1)))
}

// skipTo moves a new session's rank to step to (0: where it is), without
// copying tokens; a rank that ends before it stays at its end. batchTokens
// is the tokens of a batch. Before each batch it asks stop, whose error
// ends the skip (the daemon stopping); it ends between two lines when ctx
// does (the client gone).
func skipTo(ctx context.Context, rank *stream.Rank, to, batchTokens uint64, stop func() error) error {
	switch from := rank.Step(); {
	case to == 0 || to == from:
		return nil
	case to < from:
		return fmt.Errorf("%w: skip_to_step %d is before the resumed step %d", ErrBadRequest, to, from)
	case to-from > MaxSkipSteps(batchTokens):
		return fmt.Errorf("%w: skip_to_step %d is %d batches of %d tokens past the resumed step %d, more than the %d a session of this geometry may skip (MaxSkip %d batches, MaxSkipTokens %d tokens)",
			ErrBadRequest, to, to-from, batchTokens, from, MaxSkipSteps(batchTokens), MaxSkip, MaxSkipTokens)
	}
	for rank.Step() < to {
		if err := stop(); err != nil {
			return err
		}
		p, err := rank.SkipBatch(ctx)
		if err != nil {
			return err
		}
		if p.Lines == 0 {
			return nil
		}
	}
	return nil
}
