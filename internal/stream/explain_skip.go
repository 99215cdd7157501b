package stream

import (
	"container/heap"
	"context"
	"errors"
	"fmt"

	"github.com/dataloaderd/dataloaderd/internal/state"
)

// SkipTo moves the rank to step `to` (a rank at or past it stays), to the
// state SkipBatch would leave it in batch after batch, stopping early where
// the rank ends. dataloaderd explain reaches the step it explains this way;
// a later skip of a range of steps can too.
//
// Where the unit lengths are known without tokenizing (no text dataset), it
// counts instead: which dataset and shard serve each line follows from the
// mixing counts and the shards' line counts alone, so it decides that for
// every line, the cost of a few comparisons, and moves each shard's window
// cursor once, at the end, past the windows it served (advance): its walk
// passes whole epochs at a time, so it costs at most about two epochs of
// the shard's units, however many steps are skipped. A count assumes no
// shard's stream ends within it: a bounded run (epochs) is counted
// countChunk steps at a time, and a chunk within which a shard's stream
// ended is made again from its start and skipped batch by batch.
func (r *Rank) SkipTo(ctx context.Context, to uint64) error {
	for r.countable() && r.step < to {
		end := to
		if r.fr.epochs > 0 {
			end = min(to, r.step+countChunk)
		}
		step, before := r.step, r.State().Shards
		ok, err := r.countTo(ctx, end)
		if err != nil || ok {
			if err != nil {
				return err
			}
			continue
		}
		again, err := r.remake(ctx, step, before)
		if err != nil {
			return err
		}
		*r = *again
		if ended, err := r.skipBatches(ctx, end); ended || err != nil {
			return err
		}
	}
	_, err := r.skipBatches(ctx, to)
	return err
}

// countChunk is how many steps of a bounded run SkipTo counts at a time.
const countChunk = 4096

// skipBatches is SkipBatch up to step to; ended: the rank ended first.
func (r *Rank) skipBatches(ctx context.Context, to uint64) (ended bool, err error) {
	for r.step < to {
		p, err := r.SkipBatch(ctx)
		if err != nil || p.Lines == 0 {
			return err == nil, err
		}
	}
	return false, nil
}

// SkipsByCounting reports whether SkipTo counts its way (see SkipTo)
// rather than skipping batch by batch.
func (r *Rank) SkipsByCounting() bool { return r.countable() }

// countable reports whether the rank may count its way forward: every
// active shard has a non-empty unit (known for all but text, whose shards
// are found empty only by tokenizing them).
func (r *Rank) countable() bool {
	for _, d := range r.corpus.datasets {
		if d.lazy {
			return false
		}
	}
	return true
}

// errStreamEnded is advance's answer where a shard's stream ends before the
// cursor it is asked for.
var errStreamEnded = errors.New("the stream ends before it")

// countTo is SkipTo by counting (see SkipTo): the lines of each batch go to
// the dataset the mixer picks and its shard first in line, as nextLine
// gives them; a shard's window cursor stays where it was, its windows
// passed counted, until the end. It reports false, the rank then of no
// further use, where a shard's stream ended within the count.
func (r *Rank) countTo(ctx context.Context, to uint64) (bool, error) {
	k := r.fr.window
	passed := map[*shardRun]uint64{}
	batch := int(r.corpus.cfg.BatchSize)
	for r.step < to {
		if r.step%1024 == 0 && ctx.Err() != nil {
			return false, ctx.Err()
		}
		if r.mix.begin(r.step) {
			r.rebase()
		}
		for range batch {
			di := r.mix.pick()
			if di < 0 {
				return false, nil // every shard of the rank ended: batch by batch
			}
			d := r.datasets[di]
			s := d.active[0]
			s.st.Lines++
			if _, ok := passed[s]; !ok {
				passed[s] = 0
			}
			if s.st.Taken++; s.st.Taken == k {
				s.st.Taken = 0
				s.winOpen = false
				passed[s]++
			}
			r.mix.served(di)
			r.touched[s] = struct{}{}
			heap.Fix(&d.active, s.heapIdx)
		}
		r.step++
	}
	return r.settle(passed)
}

// settle moves the window cursor of each shard counted past the windows it
// served (passed), and reports false where a shard's stream ended within
// the count: where the line after its last served is not there.
func (r *Rank) settle(passed map[*shardRun]uint64) (bool, error) {
	k, line := r.fr.window, r.fr.line
	epochs := map[*shard]uint64{}
	for s, w := range passed {
		c, err := s.advance(&r.fr, s.st.Window, w*k*line, epochs)
		if err == nil && r.fr.epochs > 0 {
			var next state.Cursor
			if next, err = s.advance(&r.fr, c, s.st.Taken*line, epochs); err == nil && r.fr.ended(next) {
				err = errStreamEnded
			}
		}
		if errors.Is(err, errStreamEnded) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("stream: dataset %q shard %d: %w", s.ds.name, s.index, err)
		}
		if w > 0 {
			s.st.Window, s.winOpen = c, false
		}
	}
	return true, nil
}

// advance returns the cursor t tokens after c in the shard's stream, as
// walk would, passing whole epochs by the tokens of one (epochLen, kept in
// lens): a walk to the end of c's epoch, then one within the epoch it lands
// in; errStreamEnded where the stream ends first.
func (s *shard) advance(fr *framing, c state.Cursor, t uint64, lens map[*shard]uint64) (state.Cursor, error) {
	for first := c.Epoch; t > 0 && c.Epoch == first; {
		f, err := s.frame(fr, c.Epoch, c.Pos)
		if err != nil {
			return c, err
		}
		rem := f.len() - c.Offset
		if t < rem {
			c.Offset += t
			return c, nil
		}
		t -= rem
		c = s.next(c)
	}
	if t > 0 { // c is at the start of an epoch
		e, ok := lens[s]
		if !ok {
			var err error
			if e, err = s.epochLen(fr); err != nil {
				return c, err
			}
			lens[s] = e
		}
		if e == 0 {
			return c, fmt.Errorf("no tokens in an epoch, %d to pass", t)
		}
		c.Epoch += t / e
		t %= e
	}
	c, n, _, err := s.walk(fr, c, t, nil, nil, 0, nil)
	if err == nil && n < t {
		err = errStreamEnded
	}
	return c, err
}

// epochLen is the tokens of one epoch of the shard's stream: its units'
// frames, whatever their order.
func (s *shard) epochLen(fr *framing) (uint64, error) {
	var n uint64
	for u := s.lo; u < s.lo+s.n; u++ {
		f, err := s.frameOf(fr, u)
		if err != nil {
			return 0, err
		}
		n += f.len()
	}
	return n, nil
}
