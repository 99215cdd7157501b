package stream

import (
	"container/heap"
	"context"
	"fmt"
	"slices"

	"github.com/dataloaderd/dataloaderd/internal/state"
)

// Rank produces the lines and batches of one data-parallel rank: it owns a
// block of logical shards in every dataset, asks its mixer which dataset
// each line comes from (a deterministic deficit rule on the weights), picks
// the shard within the dataset so that shards advance in proportion to
// their tokens (shardchoice.go), and lays the shard's next line into the batch
// (batch.go). Every choice is a function of the shard cursors and the
// mixture log alone, so a rank rebuilt from a saved state continues
// exactly where the old one was.
type Rank struct {
	corpus   *Corpus
	fr       framing
	dpRank   uint32
	dpSize   uint32
	step     uint64
	datasets []*rankDataset
	mix      *mixer
	// skips is the skip log (skips.go): ranges of steps made and dropped;
	// a skip before a batch ends when stop does (nil: never).
	skips []state.SkipRange
	stop  context.Context
	// touched collects the shards a batch changed, for the state delta.
	touched map[*shardRun]struct{}
	// meta writes the batch metadata the config asks for (nil: none) into
	// slots laid out by its layout; out is where a batch's lines go.
	meta *metaWriter
	out  assembly
	// blocklists is the state's blocklist log; blockReport what a
	// blocklist that arrived at this resume found served (blocklist_rank.go).
	blocklists  []state.Blocklist
	blockReport BlockReport
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
		meta:    newMetaWriter(cfg, c.Layout()),
	}
	if from != nil {
		if from.Step > maxCount {
			return nil, fmt.Errorf("%w: restored step %d is beyond %d", state.ErrMismatch, from.Step, uint64(maxCount))
		}
		r.step = from.Step
		r.skips = slices.Clone(from.Skips)
	}
	mix, reweigh, err := newMixer(ctx, cfg, c.DatasetNames(), r.step, dpSize, from)
	if err != nil {
		return nil, err
	}
	r.mix = mix
	lo, hi := state.Owned(dpRank, dpSize, cfg.LogicalShards)
	for i, d := range c.datasets {
		rd := &rankDataset{index: i}
		var lines uint64
		for k := lo; k < hi; k++ {
			sr := &shardRun{shard: d.shards[k], tie: key(cfg.Seed, uint64(i), uint64(k), 0x7469)}
			if from != nil {
				if err := r.restoreShard(sr, from, reweigh); err != nil {
					return nil, err
				}
			}
			lines += sr.st.Lines - sr.st.Base
			rd.all = append(rd.all, sr)
			if sr.tokens > 0 && !r.shardDone(sr) {
				sr.heapIdx = len(rd.active)
				rd.active = append(rd.active, sr)
			}
		}
		heap.Init(&rd.active)
		r.datasets = append(r.datasets, rd)
		mix.start(i, lines, len(rd.active) > 0)
	}
	log, changed := blocklistLog(c, from, r.step)
	r.blocklists, r.blockReport.Changed = log, changed
	if _, has := c.Blocklist(); changed && has && from != nil {
		if err := r.checkServed(); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// restoreShard sets an owned shard's cursor from the restored state, which
// must hold a valid one; with reweigh its mixing count restarts.
func (r *Rank) restoreShard(sr *shardRun, from *state.Restored, reweigh bool) error {
	st, ok := from.Shards[state.ShardID{Dataset: sr.ds.index, Shard: sr.index}]
	if !ok {
		return fmt.Errorf("%w: restored state lacks dataset %q shard %d", state.ErrMismatch, sr.ds.name, sr.index)
	}
	if err := sr.shard.checkRestored(&r.fr, st); err != nil {
		return fmt.Errorf("%w: restored state of dataset %q shard %d: %v", state.ErrMismatch, sr.ds.name, sr.index, err)
	}
	sr.st = st
	if reweigh {
		sr.st.Base = sr.st.Lines
	}
	return nil
}

// Step is the number of batches the rank has produced, counting from the
// restored state's step.
func (r *Rank) Step() uint64 { return r.step }

// SetWeights changes the mixing weights from batch after+1 on (after >= the
// rank's step): they replace the configured weights or schedule, the change
// is logged (as made at run time), and the mixing counts restart there. It
// also replaces the changes asked for earlier that would take effect from
// that batch on: the newest call wins for the steps after its own. At most
// state.MaxQueued changes wait for later batches; one more is refused.
func (r *Rank) SetWeights(after uint64, weights []float64) error {
	return r.setWeights(r.step, after, weights)
}

// setWeights is SetWeights for a rank whose states are asked from step
// floor on (see mixer.set).
func (r *Rank) setWeights(floor, after uint64, weights []float64) error {
	restart, err := r.mix.set(r.step, floor, after, weights)
	if restart {
		r.rebase()
	}
	return err
}

// changedAt returns the weights of the change made at run time for the
// batches after step after, if the rank's mixture log holds one.
func (r *Rank) changedAt(after uint64) ([]float64, bool) { return r.mix.changedAt(after) }

// checkQueue refuses a change of weights for the batches after `after` that
// the state after step floor could not queue (see mixer.checkQueue).
func (r *Rank) checkQueue(floor, after uint64) error { return r.mix.checkQueue(floor, after) }

// rebase restarts every owned shard's mixing count, as the weights just put
// in effect ask; each shard goes into the next delta, so the saved state
// has every base.
func (r *Rank) rebase() {
	for _, d := range r.datasets {
		for _, sr := range d.all {
			sr.st.Base = sr.st.Lines
			r.touched[sr] = struct{}{}
		}
	}
}

// remake builds this rank again at step from the shards' state at that
// step, as a resume does, with its whole mixture log (the entries a state
// after an older step still holds, too): the rank of that step, to make its
// later batches again under another change of weights.
func (r *Rank) remake(ctx context.Context, step uint64, shards map[state.ShardID]state.Shard) (*Rank, error) {
	from := &state.Restored{Step: step, Shards: shards, FromSize: r.dpSize, Mixture: state.CloneMixture(r.mix.log),
		Skips: slices.Clone(r.skips), Blocklists: r.Blocklists()}
	return NewRankContext(ctx, r.corpus, r.dpRank, r.dpSize, from)
}

// mixtureAt is the mixture log of the rank's state after step (see
// mixer.logAt).
func (r *Rank) mixtureAt(step uint64) []state.MixChange { return r.mix.logAt(step) }

// State returns the rank's full state now, the changes of weights queued
// for later batches included.
func (r *Rank) State() state.Rank {
	st := state.Rank{DPRank: r.dpRank, DPSize: r.dpSize, Step: r.step, Shards: map[state.ShardID]state.Shard{},
		Mixture: r.mix.logAt(r.step), Skips: r.skipsAt(r.step), Blocklists: r.Blocklists()}
	for _, d := range r.datasets {
		for _, s := range d.all {
			st.Shards[state.ShardID{Dataset: s.ds.index, Shard: s.index}] = s.st
		}
	}
	return st
}
