package stream

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/bits"
	"runtime"

	"golang.org/x/sync/errgroup"

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
// shard's stream ends within it (the only way in an endless run): where
// one did (a bounded run), the rank is made again at the count's start
// and counts half as many steps, down to countChunk steps, which it skips
// batch by batch.
func (r *Rank) SkipTo(ctx context.Context, to uint64) error {
	for span := r.countSpan(to); r.countable() && r.step < to; {
		span = min(span, to-r.step)
		step, before := r.step, r.State().Shards
		ok, err := r.countTo(ctx, step+span)
		if err != nil {
			return err
		}
		if ok {
			continue
		}
		again, err := r.remake(ctx, step, before)
		if err != nil {
			return err
		}
		*r = *again
		if span > countChunk {
			span /= 2
			continue
		}
		if ended, err := r.skipBatches(ctx, step+span); ended || err != nil {
			return err
		}
		span = to - r.step // the next count tries the rest whole
	}
	_, err := r.skipBatches(ctx, to)
	return err
}

// countSpan is how many steps SkipTo counts first on its way to step to:
// all of them in an endless run; in a bounded one, at most about twice the
// steps the rank's shards have lines left for, by their token counts (an
// estimate: a count past the rank's end would go on to `to`).
func (r *Rank) countSpan(to uint64) uint64 {
	span := to - min(r.step, to)
	if r.fr.epochs == 0 {
		return span
	}
	var lines uint64
	for _, d := range r.datasets {
		for _, s := range d.active {
			hi, lo := bits.Mul64(r.fr.epochs, s.tokens)
			if hi >= r.fr.line {
				return span // more lines than a count could take
			}
			total, _ := bits.Div64(hi, lo, r.fr.line)
			left := total + 1 - min(s.st.Lines, total+1)
			if lines+left < lines || lines+left > 1<<62 {
				return span
			}
			lines += left
		}
	}
	return min(span, 2*(lines/uint64(r.corpus.cfg.BatchSize)+1)+countChunk)
}

// countChunk is the fewest steps SkipTo counts; a count of as few within
// which a shard's stream ended is skipped batch by batch.
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
// the count: where the line after its last served is not there. The shards
// are walked at once, each on its own goroutine (up to GOMAXPROCS): a walk
// is mostly waits on memory, or on the pages of a mapped corpus.
func (r *Rank) settle(passed map[*shardRun]uint64) (bool, error) {
	type settled struct {
		s     *shardRun
		w     uint64
		c     state.Cursor
		ended bool
	}
	out := make([]settled, 0, len(passed))
	for s, w := range passed {
		out = append(out, settled{s: s, w: w})
	}
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i := range out {
		g.Go(func() error {
			o := &out[i]
			var err error
			o.c, o.ended, err = r.settleShard(o.s, o.w)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return false, err
	}
	for _, o := range out {
		if o.ended {
			return false, nil
		}
	}
	for _, o := range out {
		if o.w > 0 {
			o.s.st.Window, o.s.winOpen = o.c, false
		}
	}
	return true, nil
}

// settleShard is the window cursor w windows after shard s's, and whether
// its stream ended before the line after its last served (bounded runs).
func (r *Rank) settleShard(s *shardRun, w uint64) (state.Cursor, bool, error) {
	k, line := r.fr.window, r.fr.line
	var epoch uint64 // its tokens, once known
	c, err := s.advance(&r.fr, s.st.Window, w*k*line, &epoch)
	if err == nil && r.fr.epochs > 0 {
		var next state.Cursor
		if next, err = s.advance(&r.fr, c, s.st.Taken*line, &epoch); err == nil && r.fr.ended(next) {
			err = errStreamEnded
		}
	}
	if errors.Is(err, errStreamEnded) {
		return c, true, nil
	}
	if err != nil {
		return c, false, fmt.Errorf("stream: dataset %q shard %d: %w", s.ds.name, s.index, err)
	}
	return c, false, nil
}

// advance returns the cursor t tokens after c in the shard's stream, as
// walk would, passing whole epochs by the tokens of one (epochLen, kept in
// *epoch, 0 until known): a walk to the end of c's epoch, then one within
// the epoch it lands in; errStreamEnded where the stream ends first.
func (s *shard) advance(fr *framing, c state.Cursor, t uint64, epoch *uint64) (state.Cursor, error) {
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
		if *epoch == 0 {
			var err error
			if *epoch, err = s.epochLen(fr); err != nil {
				return c, err
			}
		}
		e := *epoch
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
