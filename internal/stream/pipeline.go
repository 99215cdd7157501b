package stream

import (
	"context"
	"fmt"
	"maps"
	"sync"

	"github.com/dataloaderd/dataloaderd/internal/errkind"
	"github.com/dataloaderd/dataloaderd/internal/state"
)

// Errors of the consumer side of a pipeline.
var (
	// ErrUnknownSlot: a release names a slot that does not hold that step
	// for that consumer.
	ErrUnknownSlot = errkind.New(errkind.Invalid, "unknown slot")
	// ErrStep: a state was asked for a step the pipeline cannot give.
	ErrStep = errkind.New(errkind.FailedPrecondition, "step not available")
	// ErrClosed: the pipeline was closed.
	ErrClosed = errkind.New(errkind.Unavailable, "pipeline closed")
)

// Slots is the memory batches are written into: a ring of equal slots, each
// holding one batch of little-endian int32 tokens.
type Slots interface {
	Slots() int
	Slot(i int) []byte
}

// committer is a ring whose slots are staging memory that must be pushed to
// where consumers read it (a GPU) after a batch is written; a batch is
// announced only once Commit returned.
type committer interface {
	Commit(i int) error
}

// Batch tells a consumer that slot Slot holds step Step's Lines lines; End
// says the rank's iteration is over (and no slot is held).
type Batch struct {
	Step  uint64
	Slot  int
	Lines int
	End   bool
	// DatasetLines counts the batch's lines by dataset.
	DatasetLines []int
	// Segments and MaxSeqlen describe the batch's cu_seqlens, if any.
	Segments, MaxSeqlen int
	// Weights are the mixing weights the batch was drawn by (config order).
	Weights []float64
	// Generation is the pipeline's generation when the batch was handed out
	// (see SetWeights).
	Generation uint64
	// Cost is the time the batch took to make, by cause (cost.go), its
	// wait for a slot and its copy to a device included.
	Cost Cost
	// Skipped counts the batches of a skipped range made and dropped just
	// before this one (skips.go), SkippedLines their lines by dataset: the
	// batch's step is then not the one after the batch before it.
	Skipped      uint64
	SkippedLines []int
}

// Pipeline runs a rank ahead of its consumers into a ring of slots. Every
// consumer reads every batch in step order; a slot is written again only
// after all consumers released it, so memory is bounded by the ring. The
// pipeline keeps the state at the last step every consumer released plus the
// deltas of the steps in flight, so it can give the state after any consumed
// step without replaying anything.
type Pipeline struct {
	rank      *Rank
	ring      Slots
	consumers int
	fp        state.Fingerprint
	hooks     Hooks

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every change
	produced uint64        // last step produced
	ended    bool
	err      error
	closed   bool
	inFlight map[uint64]*inFlight
	slotStep []uint64 // step held by each slot, 0 when free
	next     []uint64 // per consumer: last step handed out
	// endSeen is, per consumer, 1 + the generation of the end Next handed
	// it (0: none): the end of a generation is handed once.
	endSeen []uint64
	// base is the state after the last step every consumer released, but
	// for its mixture and skip logs: the rank keeps the one log of each,
	// from which a state after any step from base on takes its own
	// (stateAt). A step of a skipped range has no batch in flight (no
	// entry): the step after a batch is not always the next batch's.
	base state.Rank
	// pause holds the producer before its next batch; busy is set while it
	// makes one (SetWeights waits for it to finish).
	pause, busy bool
	// gen counts the times produced batches were dropped to be made again.
	gen uint64
}

// Hooks let a transport follow the producer without polling; each is called
// from the producer's goroutine, without the pipeline's lock, and may be nil.
type Hooks struct {
	// Produced is called after a batch is written into its slot, in step order.
	Produced func(Batch)
	// Finished is called when the producer finds the end of the rank's
	// iteration (err nil, step the last step), again after a change of
	// weights took that end back (Remade) and the batches made again end, or
	// once when production fails (err).
	Finished func(step uint64, err error)
	// SlotWait is called with true before the producer waits for a slot to be
	// released, and with false when it has one.
	SlotWait func(waiting bool)
	// Remade is called, with the producer held, when the batches after step
	// `after` were dropped to be made again (a change of weights); an end
	// announced after them (Finished) is taken back with them.
	Remade func(after uint64)
}

// SetHooks installs hooks; call it before Run.
func (p *Pipeline) SetHooks(h Hooks) { p.hooks = h }

type inFlight struct {
	Batch
	delta    Delta
	released []bool
	left     int
}

// NewPipeline wraps a rank; Run fills the ring.
func NewPipeline(rank *Rank, ring Slots, consumers int) *Pipeline {
	p := &Pipeline{
		rank: rank, ring: ring, consumers: consumers, fp: rank.corpus.Fingerprint(),
		changed:  make(chan struct{}),
		produced: rank.Step(),
		inFlight: map[uint64]*inFlight{},
		slotStep: make([]uint64, ring.Slots()),
		next:     make([]uint64, consumers),
		endSeen:  make([]uint64, consumers),
		base:     rank.State(),
	}
	p.base.Mixture, p.base.Skips = nil, nil
	for i := range p.next {
		p.next[i] = p.produced
	}
	return p
}

// Fingerprint identifies the corpus the pipeline serves.
func (p *Pipeline) Fingerprint() state.Fingerprint { return p.fp }

// StartStep is the step the pipeline started after.
func (p *Pipeline) StartStep() uint64 { return p.base.Step }

func (p *Pipeline) broadcast() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// wait blocks until cond (called with p.mu held) is true or ctx ends.
func (p *Pipeline) wait(ctx context.Context, cond func() bool) error {
	for !cond() {
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			p.mu.Lock()
			return ctx.Err()
		case <-ch:
		}
		p.mu.Lock()
	}
	return nil
}

// Next blocks until consumer c's next batch is ready and returns it; after
// the rank's last batch, an End batch. The end is handed once: a change of
// weights may take it back (its Generation is then older than the
// pipeline's), and the next call waits for the batches made again and
// their end, or for the pipeline's close.
func (p *Pipeline) Next(ctx context.Context, c int) (Batch, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.wait(ctx, func() bool {
		return p.closed || p.err != nil || p.produced > p.next[c] || p.ended && p.endSeen[c] != p.gen+1
	})
	switch {
	case err != nil:
		return Batch{}, err
	case p.closed:
		return Batch{}, ErrClosed
	case p.produced > p.next[c]:
		p.next[c] = p.following(p.next[c])
		b := p.inFlight[p.next[c]].Batch
		b.Generation = p.gen
		return b, nil
	case p.err != nil:
		return Batch{}, p.err
	default:
		p.endSeen[c] = p.gen + 1
		return Batch{Step: p.produced, End: true, Generation: p.gen}, nil
	}
}

// Release frees consumer c's hold on a slot. When every consumer released a
// step, its slot is free again and its delta joins the base state.
func (p *Pipeline) Release(c int, slot int, step uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.inFlight[step]
	if f == nil || f.Slot != slot || step > p.next[c] || f.released[c] {
		return fmt.Errorf("%w: slot %d does not hold step %d for consumer %d", ErrUnknownSlot, slot, step, c)
	}
	p.release(c, f)
	p.broadcast()
	return nil
}

// ReleaseThrough frees consumer c's hold on every step up to step, for
// consumers that read batches from the ring without Next (the shared-memory
// control block): the steps count as handed to c and released in one go.
// Releasing a step not produced yet is an error.
func (p *Pipeline) ReleaseThrough(c int, step uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if step > p.produced {
		return fmt.Errorf("%w: consumer %d released up to step %d, but only %d are produced", ErrUnknownSlot, c, step, p.produced)
	}
	if step <= p.next[c] {
		return nil
	}
	for s := p.next[c] + 1; s <= step; s++ {
		if f := p.inFlight[s]; f != nil && !f.released[c] {
			p.release(c, f)
		}
	}
	p.next[c] = step
	p.broadcast()
	return nil
}

// release marks f released by c; p.mu is held.
func (p *Pipeline) release(c int, f *inFlight) {
	f.released[c] = true
	f.left--
	if f.left > 0 {
		return
	}
	p.slotStep[f.Slot] = 0
	// Fold fully released steps into the base, in step order.
	for {
		g := p.inFlight[p.following(p.base.Step)]
		if g == nil || g.left > 0 {
			break
		}
		for id, s := range g.delta {
			p.base.Shards[id] = s
		}
		p.base.Step = g.Step
		delete(p.inFlight, g.Step)
	}
}

// State returns the rank's state after step, which must be produced and not
// older than the last step every consumer released.
//
// Once the rank's iteration has ended, any later step is available too: a
// client that pads (equal steps across ranks) counts steps past the last
// batch, and the state after them is the final one at that step, from which
// a resume ends at once.
func (p *Pipeline) State(step uint64) (state.Rank, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	last := step
	if p.ended && step > p.produced {
		last = p.produced
	}
	if last < p.base.Step || last > p.produced {
		return state.Rank{}, fmt.Errorf("%w: state after step %d asked for; steps %d to %d are available", ErrStep, step, p.base.Step, p.produced)
	}
	if made := p.madeAtOrBefore(last); made != last && !(p.ended && last == p.produced) {
		// A step of a skipped range: the state after the batch served
		// before the range, whose log holds the range pending, resumes at
		// the same next batch.
		last, step = made, made
	}
	return p.stateAt(last, step), nil
}

// stateAt is the state after step last (produced, not older than the base)
// as of step step (>= last: the same cursors once the iteration ended); p.mu
// is held.
func (p *Pipeline) stateAt(last, step uint64) state.Rank {
	return state.Rank{DPRank: p.base.DPRank, DPSize: p.base.DPSize, Step: step,
		Shards: p.shardsAt(last), Mixture: p.rank.mixtureAt(step), Skips: p.rank.skipsAt(step), Blocklists: p.rank.Blocklists()}
}

// shardsAt is the shards' state after step last (produced, not older than
// the base); p.mu is held.
func (p *Pipeline) shardsAt(last uint64) map[state.ShardID]state.Shard {
	shards := maps.Clone(p.base.Shards)
	for s := p.base.Step + 1; s <= last; s++ {
		if f := p.inFlight[s]; f != nil { // none for a skipped step
			maps.Copy(shards, f.delta)
		}
	}
	return shards
}

// Cost is the time the steps first to last took to make, by cause: of
// those still in flight (produced, and not released by every consumer).
func (p *Pipeline) Cost(first, last uint64) Cost {
	p.mu.Lock()
	defer p.mu.Unlock()
	var sum Cost
	for s := first; s <= last && s <= p.produced; s++ {
		if f := p.inFlight[s]; f != nil {
			for c, d := range f.Cost {
				sum[c] += d
			}
		}
	}
	return sum
}

// Ready is the number of produced batches consumer c has not been handed.
func (p *Pipeline) Ready(c int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for s := range p.inFlight {
		if s > p.next[c] {
			n++
		}
	}
	return n
}

// Wait blocks until the producer has stopped for good: it returns the last
// step and nil once the rank's iteration ended and every consumer released
// its last batch (before that a change of weights may take the end back),
// the production error, or ErrClosed / ctx's error.
func (p *Pipeline) Wait(ctx context.Context) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.wait(ctx, func() bool { return p.closed || p.err != nil || p.endFinal() })
	switch {
	case err != nil:
		return 0, err
	case p.err != nil:
		return p.produced, p.err
	case p.closed:
		return 0, ErrClosed
	}
	return p.produced, nil
}

// Close stops Run and wakes every waiting consumer.
func (p *Pipeline) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		p.broadcast()
	}
}
