package stream

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/dataloaderd/dataloaderd/internal/state"
)

// Errors of the consumer side of a pipeline.
var (
	// ErrUnknownSlot: a release names a slot that does not hold that step
	// for that consumer.
	ErrUnknownSlot = errors.New("unknown slot")
	// ErrStep: a state was asked for a step the pipeline cannot give.
	ErrStep = errors.New("step not available")
	// ErrClosed: the pipeline was closed.
	ErrClosed = errors.New("pipeline closed")
)

// Slots is the memory batches are written into: a ring of equal slots, each
// holding one batch of little-endian int32 tokens.
type Slots interface {
	Slots() int
	Slot(i int) []byte
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

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every change
	produced uint64        // last step produced
	ended    bool
	err      error
	closed   bool
	inFlight map[uint64]*inFlight
	slotStep []uint64 // step held by each slot, 0 when free
	next     []uint64 // per consumer: last step handed out
	base     state.Rank
}

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
		base:     rank.State(),
	}
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

// Run produces batches until the rank is done, ctx ends or the pipeline is
// closed. A production error is returned and handed to every consumer.
func (p *Pipeline) Run(ctx context.Context) error {
	n := uint64(len(p.slotStep))
	for {
		p.mu.Lock()
		step := p.produced + 1
		slot := int((step - 1) % n)
		err := p.wait(ctx, func() bool { return p.closed || p.slotStep[slot] == 0 })
		if err == nil && p.closed {
			err = ErrClosed
		}
		p.mu.Unlock()
		if err != nil {
			return err
		}
		prod, err := p.rank.NextBatchBytes(p.ring.Slot(slot))
		p.mu.Lock()
		switch {
		case err != nil:
			p.err = fmt.Errorf("producing step %d: %w", step, err)
		case prod.Lines == 0:
			p.ended = true
		default:
			p.produced = step
			p.slotStep[slot] = step
			p.inFlight[step] = &inFlight{
				Batch:    Batch{Step: step, Slot: slot, Lines: prod.Lines, DatasetLines: prod.DatasetLines},
				delta:    prod.Delta,
				released: make([]bool, p.consumers),
				left:     p.consumers,
			}
		}
		done, perr := p.ended, p.err
		p.broadcast()
		p.mu.Unlock()
		if perr != nil {
			return perr
		}
		if done {
			return nil
		}
	}
}

// Next blocks until consumer c's next batch is ready and returns it.
func (p *Pipeline) Next(ctx context.Context, c int) (Batch, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.wait(ctx, func() bool {
		return p.closed || p.err != nil || p.ended || p.produced > p.next[c]
	})
	switch {
	case err != nil:
		return Batch{}, err
	case p.closed:
		return Batch{}, ErrClosed
	case p.produced > p.next[c]:
		p.next[c]++
		return p.inFlight[p.next[c]].Batch, nil
	case p.err != nil:
		return Batch{}, p.err
	default:
		return Batch{Step: p.produced, End: true}, nil
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
	f.released[c] = true
	f.left--
	if f.left > 0 {
		return nil
	}
	p.slotStep[slot] = 0
	// Fold fully released steps into the base, in step order.
	for {
		g := p.inFlight[p.base.Step+1]
		if g == nil || g.left > 0 {
			break
		}
		for id, s := range g.delta {
			p.base.Shards[id] = s
		}
		p.base.Step = g.Step
		delete(p.inFlight, g.Step)
	}
	p.broadcast()
	return nil
}

// State returns the rank's state after step, which must be a step some
// consumer has been handed and that is not older than the last step every
// consumer released.
func (p *Pipeline) State(step uint64) (state.Rank, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var handed uint64
	for _, n := range p.next {
		handed = max(handed, n)
	}
	if step < p.base.Step || step > handed {
		return state.Rank{}, fmt.Errorf("%w: state after step %d asked for; steps %d to %d are available", ErrStep, step, p.base.Step, handed)
	}
	st := p.base.Clone()
	for s := p.base.Step + 1; s <= step; s++ {
		for id, sh := range p.inFlight[s].delta {
			st.Shards[id] = sh
		}
	}
	st.Step = step
	return st, nil
}

// Ready is the number of produced batches consumer c has not been handed.
func (p *Pipeline) Ready(c int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return int(p.produced - p.next[c])
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
