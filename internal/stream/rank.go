package stream

import (
	"container/heap"
	"context"
	"fmt"
	"math/bits"
	"slices"
	"unsafe"

	"github.com/dataloaderd/dataloaderd/internal/state"
)

// Rank produces the lines and batches of one data-parallel rank: it owns a
// block of logical shards in every dataset, picks the dataset of each line by
// a deterministic deficit rule on the weights, picks the shard within the
// dataset so that shards advance in proportion to their tokens, and takes the
// shard's next line. Every choice is a function of the shard cursors alone, so
// a rank rebuilt from saved cursors continues exactly where the old one was.
type Rank struct {
	corpus   *Corpus
	fr       framing
	dpRank   uint32
	dpSize   uint32
	step     uint64
	datasets []*rankDataset
	weights  []float64
	mixture  []state.MixChange
	// schedule, when the mixture in effect has one, sets weights at every
	// step; share sums each dataset's share of the weights over the steps
	// since the mixture log's last change (see pickDataset).
	schedule []state.SchedulePoint
	share    *shareSum
	// pending are changes of weights made at run time for later batches,
	// in step order (the log's queued entries).
	pending []state.MixChange
	// touched collects the shards a batch changed, for the state delta.
	touched map[*shardRun]struct{}
	// meta writes the batch metadata the config asks for (nil: none) into
	// slots laid out by its layout, from the pieces and length of each line.
	meta   *metaWriter
	pieces []piece
	filled uint64
	from   *shardRun
}

type rankDataset struct {
	index  int
	lines  uint64 // lines served from the owned shards since the weights took effect
	all    []*shardRun
	active shardHeap
}

// shardRun is an owned shard with its cursor and its open window.
type shardRun struct {
	*shard
	st      state.Shard
	win     window
	winOpen bool
	// hinted: the units of the window to open next were prefetched.
	hinted bool
	// ahead is how many units of its windows the shard asks its source
	// to prepare when it opens one (0: the default, 2).
	ahead   uint64
	tie     uint64
	heapIdx int
}

// NewRank builds rank dpRank of dpSize over the corpus, starting from the
// restored state (nil: from the beginning).
func NewRank(c *Corpus, dpRank, dpSize uint32, from *state.Restored) (*Rank, error) {
	return NewRankContext(context.Background(), c, dpRank, dpSize, from)
}

// NewRankContext is NewRank whose replay of a schedule up to the restored
// step stops when ctx ends (a client gone, a daemon stopping).
func NewRankContext(ctx context.Context, c *Corpus, dpRank, dpSize uint32, from *state.Restored) (*Rank, error) {
	cfg := c.cfg
	if err := cfg.ValidateRank(dpRank, dpSize); err != nil {
		return nil, err
	}
	r := &Rank{
		corpus: c, dpRank: dpRank, dpSize: dpSize,
		fr: framing{
			bos: int32(cfg.BOS), hasBOS: cfg.BOS >= 0, eos: int32(cfg.EOS), pad: int32(cfg.Pad),
			epochs: uint64(cfg.Epochs), line: uint64(cfg.LineTokens()), window: cfg.Window(), seed: cfg.Seed,
		},
		touched: map[*shardRun]struct{}{},
		meta:    newMetaWriter(cfg),
	}
	reweigh, err := r.restoreMixture(ctx, from)
	if err != nil {
		return nil, err
	}
	lo, hi := state.Owned(dpRank, dpSize, cfg.LogicalShards)
	for i, d := range c.datasets {
		rd := &rankDataset{index: i}
		for k := lo; k < hi; k++ {
			sr := &shardRun{shard: d.shards[k], tie: key(cfg.Seed, uint64(i), uint64(k), 0x7469)}
			if from != nil {
				st, ok := from.Shards[state.ShardID{Dataset: i, Shard: k}]
				if !ok {
					return nil, fmt.Errorf("%w: restored state lacks dataset %q shard %d", state.ErrMismatch, d.name, k)
				}
				if err := sr.shard.checkRestored(&r.fr, st); err != nil {
					return nil, fmt.Errorf("%w: restored state of dataset %q shard %d: %v", state.ErrMismatch, d.name, k, err)
				}
				sr.st = st
				if reweigh {
					sr.st.Base = sr.st.Lines
				}
			}
			rd.lines += sr.st.Lines - sr.st.Base
			rd.all = append(rd.all, sr)
			if sr.tokens > 0 && !r.shardDone(sr) {
				sr.heapIdx = len(rd.active)
				rd.active = append(rd.active, sr)
			}
		}
		heap.Init(&rd.active)
		r.datasets = append(r.datasets, rd)
	}
	return r, nil
}

// Step is the number of batches the rank has produced, counting from the
// restored state's step.
func (r *Rank) Step() uint64 { return r.step }

// shardDone reports, without opening a window, whether a shard has served
// its last line: its window cursor is past the last epoch.
func (r *Rank) shardDone(s *shardRun) bool { return r.fr.ended(s.st.Window) }

// nextLine writes the rank's next line into dst (LineTokens long) and returns
// its dataset; nil when every dataset of the rank has served its last epoch.
func (r *Rank) nextLine(dst []int32) (*rankDataset, error) {
	for {
		d := r.pickDataset()
		if d == nil {
			return nil, nil
		}
		s := d.active[0]
		if !s.winOpen {
			// The shards the heap serves next are about to open windows
			// too: let sources that prepare units (text) start on them.
			// A source in object storage gets every shard's next units,
			// once per window, so that their fetches overlap: its depth
			// shared among the rank's shards.
			near, ahead := min(len(d.active), 4), uint64(1)
			s.ahead = 2
			if total := s.ds.ahead; total > 0 {
				near = len(d.active)
				ahead = min(max(4, total/uint64(len(d.active))), maxPrefetchAhead)
				s.ahead = ahead
			}
			for i := 1; i < near; i++ {
				if n := d.active[i]; !n.winOpen && !n.hinted {
					n.prefetchAhead(&r.fr, n.st.Window, ahead)
					n.hinted = s.ds.ahead > 0
				}
			}
		}
		ok, err := r.shardLine(s, dst)
		if err != nil {
			return nil, err
		}
		if !ok {
			heap.Pop(&d.active)
			continue
		}
		d.lines++
		r.touched[s] = struct{}{}
		if r.shardDone(s) {
			heap.Pop(&d.active)
		} else {
			heap.Fix(&d.active, s.heapIdx)
		}
		return d, nil
	}
}

// shardLine emits the shard's next line; false when it has none left.
func (r *Rank) shardLine(s *shardRun, dst []int32) (bool, error) {
	fr := &r.fr
	if !s.winOpen {
		if err := s.openWindow(fr, s.st.Window, &s.win, max(s.ahead, 2)); err != nil {
			return false, err
		}
		s.winOpen, s.hinted = true, false
	}
	c := s.st.Taken
	if c >= s.win.lines {
		// Only a window at the stream's end runs short or empty.
		s.st.Window, s.st.Taken = r.endOf(s.win), 0
		s.winOpen = false
		return false, nil
	}
	j := s.lineOrder(fr, s.st.Window, s.win.lines, c)
	var pc *[]piece
	if r.meta != nil {
		r.pieces = r.pieces[:0]
		pc = &r.pieces
	}
	if dst != nil {
		filled, err := s.fillLine(fr, &s.win, j, dst, pc)
		if err != nil {
			return false, err
		}
		r.filled, r.from = filled, s
	}
	s.st.Lines++
	s.st.Taken++
	if s.st.Taken == s.win.lines {
		s.st.Window, s.st.Taken = r.endOf(s.win), 0
		s.winOpen = false
	}
	return true, nil
}

// endOf is where the next window starts after w; a window shorter than the
// configured one is the stream's last, and its end is marked ended.
func (r *Rank) endOf(w window) state.Cursor {
	end := w.starts[w.lines]
	if w.lines < r.fr.window && r.fr.epochs > 0 && !r.fr.ended(end) {
		end = state.Cursor{Epoch: r.fr.epochs}
	}
	return end
}

// Delta is the new state of the shards one batch changed.
type Delta map[state.ShardID]state.Shard

// Produced describes one batch.
type Produced struct {
	// Lines is BatchSize, fewer in the last batch, 0 once the rank is done.
	Lines int
	// Delta holds the state of the shards the batch moved.
	Delta Delta
	// DatasetLines counts the batch's lines by dataset.
	DatasetLines []int
	// Segments and MaxSeqlen describe cu_seqlens (when the config asks for
	// it): its segments and the longest one's length.
	Segments, MaxSeqlen int
	// Weights are the mixing weights of the batch (config order): the
	// datasets' weights, or the schedule's at its step. Not to be written.
	Weights []float64
}

// NextBatch fills dst (BatchSize lines) with tokens alone.
func (r *Rank) NextBatch(dst []int32) (Produced, error) {
	return r.nextBatch(context.Background(), dst, nil)
}

// nextBatch fills dst, and with mw the batch's metadata; a skip (dst nil)
// stops between two lines when stop ends.
func (r *Rank) nextBatch(stop context.Context, dst []int32, mw *metaWriter) (Produced, error) {
	line := r.corpus.cfg.LineTokens()
	for len(r.pending) > 0 && r.pending[0].Step == r.step {
		r.applyPending()
	}
	if r.share != nil && r.share.at == r.step {
		_ = r.share.advance(context.Background(), r.step+1) // one step: never stopped
		r.weights = r.share.weights
	}
	p := Produced{DatasetLines: make([]int, len(r.datasets))}
	lines := len(dst) / line
	if dst == nil {
		lines = int(r.corpus.cfg.BatchSize) // SkipBatch: the cursors move, nothing is copied
	}
	for p.Lines < lines {
		var lt []int32
		if dst != nil {
			lt = dst[p.Lines*line : (p.Lines+1)*line]
		} else if stop.Err() != nil {
			return Produced{}, stop.Err()
		}
		d, err := r.nextLine(lt)
		if err != nil {
			return Produced{}, err
		}
		if d == nil {
			break
		}
		if mw != nil && dst != nil {
			if err := mw.addLine(p.Lines, lt, int(r.filled), r.pieces, r.from.shard, d.index); err != nil {
				return Produced{}, err
			}
		}
		p.DatasetLines[d.index]++
		p.Lines++
	}
	if mw != nil {
		mw.finish(p.Lines)
		p.Segments, p.MaxSeqlen = mw.segments, mw.maxSeqlen
	}
	p.Weights = r.weights
	if r.schedule != nil {
		p.Weights = slices.Clone(r.weights) // the schedule writes r.weights at every step
	}
	p.Delta = make(Delta, len(r.touched))
	for s := range r.touched {
		p.Delta[state.ShardID{Dataset: s.ds.index, Shard: s.index}] = s.st
		delete(r.touched, s)
	}
	if p.Lines > 0 {
		r.step++
	}
	return p, nil
}

// SkipBatch moves the rank past its next batch as NextBatch would, without
// reading or copying a token: the windows of the shards it reaches are laid
// out from document lengths alone. A reopened session reaches the step its
// client had read this way. It stops between two lines when ctx ends,
// returning ctx's error: the rank is then half way through the batch and
// of no further use.
func (r *Rank) SkipBatch(ctx context.Context) (Produced, error) { return r.nextBatch(ctx, nil, nil) }

// NextBatchBytes writes the next batch into a slot laid out as Layout
// says: little-endian int32 tokens, then the config's metadata.
func (r *Rank) NextBatchBytes(slot []byte) (Produced, error) {
	if r.meta == nil {
		return r.NextBatch(int32s(slot))
	}
	r.meta.start(slot)
	return r.nextBatch(context.Background(), r.meta.tokens(slot), r.meta)
}

// int32s views a byte slot as tokens; slots are page-aligned.
func int32s(b []byte) []int32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(&b[0])), len(b)/4)
}

// State returns the rank's full state now, the changes of weights queued
// for later batches included.
func (r *Rank) State() state.Rank {
	st := state.Rank{DPRank: r.dpRank, DPSize: r.dpSize, Step: r.step, Shards: map[state.ShardID]state.Shard{},
		Mixture: state.CloneMixture(append(slices.Clip(r.mixture), r.pending...))}
	for _, d := range r.datasets {
		for _, s := range d.all {
			st.Shards[state.ShardID{Dataset: s.ds.index, Shard: s.index}] = s.st
		}
	}
	return st
}

// shardHeap orders a dataset's active shards by (lines+1)/tokens, so each
// shard's share of the lines follows its share of the tokens; ties go by a
// seeded key.
type shardHeap []*shardRun

func (h shardHeap) Len() int { return len(h) }
func (h shardHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	ah, al := bits.Mul64(a.st.Lines+1, b.tokens)
	bh, bl := bits.Mul64(b.st.Lines+1, a.tokens)
	if ah != bh {
		return ah < bh
	}
	if al != bl {
		return al < bl
	}
	return a.tie < b.tie
}
func (h shardHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}
func (h *shardHeap) Push(x any) {
	s := x.(*shardRun)
	s.heapIdx = len(*h)
	*h = append(*h, s)
}
func (h *shardHeap) Pop() any {
	old := *h
	s := old[len(old)-1]
	*h = old[:len(old)-1]
	return s
}
