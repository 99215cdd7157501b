package stream

import (
	"context"
	"unsafe"

	"github.com/dataloaderd/dataloaderd/internal/state"
)

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
	// Cost is the time the batch took, by cause: each line's time under its
	// dataset's cause, the rest as packing (a skipped batch counts none).
	Cost Cost
	// Skipped counts the batches of a skipped range passed just before
	// this one (skips.go), SkippedLines their lines by dataset.
	Skipped      uint64
	SkippedLines []int
}

// assemblyMode is what a batch does with its lines.
type assemblyMode int

const (
	// copyLines copies each line's tokens into the batch, and with a
	// metadata writer its metadata.
	copyLines assemblyMode = iota
	// skipLines moves the cursors past the lines without reading or
	// copying a token: the windows are laid out from document lengths.
	skipLines
)

// assembly is where the lines of one batch go: copied, line after line,
// into dst (LineTokens each) with their metadata (meta, nil: none), or
// skipped, the batch stopping between two lines when stop ends.
type assembly struct {
	mode  assemblyMode
	lines int // the lines the batch has room for
	line  int // the tokens of a line
	dst   []int32
	meta  *metaWriter
	stop  context.Context
	// The last line copied: its tokens before the padding, its pieces
	// (with meta), and its shard.
	filled uint64
	pieces []piece
	from   *shard
	// trace, when not nil, keeps every line's pieces (explain.go); nil
	// but for dataloaderd explain.
	trace *batchTrace
}

// copying points the assembly at a batch of tokens, dst, and its metadata.
func (a *assembly) copying(dst []int32, line int, meta *metaWriter) {
	*a = assembly{mode: copyLines, lines: len(dst) / line, line: line, dst: dst, meta: meta, pieces: a.pieces[:0]}
}

// skipping sets the assembly to skip a batch of lines lines.
func (a *assembly) skipping(stop context.Context, lines int) {
	*a = assembly{mode: skipLines, lines: lines, stop: stop, pieces: a.pieces[:0]}
}

// more reports whether the batch has room after n lines; a skip's error is
// its context's, once that ended.
func (a *assembly) more(n int) (bool, error) {
	if n >= a.lines {
		return false, nil
	}
	if a.mode == skipLines && a.stop.Err() != nil {
		return false, a.stop.Err()
	}
	return true, nil
}

// take lays line j of shard s's open window into line i of the batch;
// a skip takes nothing.
func (a *assembly) take(fr *framing, i int, s *shardRun, j uint64) error {
	if a.mode == skipLines {
		return nil
	}
	var pc *[]piece
	if a.meta != nil || a.trace != nil {
		a.pieces = a.pieces[:0]
		pc = &a.pieces
	}
	filled, err := s.fillLine(fr, &s.win, j, a.dst[i*a.line:(i+1)*a.line], pc)
	if err != nil {
		return err
	}
	a.filled, a.from = filled, s.shard
	if a.trace != nil {
		a.trace.add(s.shard, a.pieces)
	}
	return nil
}

// describe writes the metadata of line i, the last taken, of dataset ds.
func (a *assembly) describe(i, ds int) error {
	if a.meta == nil {
		return nil
	}
	return a.meta.addLine(i, a.dst[i*a.line:(i+1)*a.line], int(a.filled), a.pieces, a.from, ds)
}

// finish closes the batch's metadata after its lines lines, into p.
func (a *assembly) finish(lines int, p *Produced) {
	if a.meta != nil {
		a.meta.finish(lines)
		p.Segments, p.MaxSeqlen = a.meta.segments, a.meta.maxSeqlen
	}
}

// NextBatch fills dst (BatchSize lines) with tokens alone.
func (r *Rank) NextBatch(dst []int32) (Produced, error) {
	r.out.copying(dst, r.corpus.cfg.LineTokens(), nil)
	return r.nextBatch()
}

// SkipBatch moves the rank past its next batch as NextBatch would, without
// reading or copying a token: the windows of the shards it reaches are laid
// out from document lengths alone. A reopened session reaches the step its
// client had read this way. It stops between two lines when ctx ends,
// returning ctx's error: the rank is then half way through the batch and
// of no further use.
func (r *Rank) SkipBatch(ctx context.Context) (Produced, error) {
	r.out.skipping(ctx, int(r.corpus.cfg.BatchSize))
	return r.nextBatch()
}

// NextBatchBytes writes the next batch into a slot laid out as Layout
// says: little-endian int32 tokens, then the config's metadata.
func (r *Rank) NextBatchBytes(slot []byte) (Produced, error) {
	if r.meta == nil {
		return r.NextBatch(int32s(slot))
	}
	r.meta.start(slot)
	r.out.copying(r.meta.tokens(slot), r.corpus.cfg.LineTokens(), r.meta)
	return r.nextBatch()
}

// nextBatch makes the rank's next batch into r.out: the mixer readied for
// it, its lines taken one by one, and the state of the shards it moved.
func (r *Rank) nextBatch() (Produced, error) {
	out := &r.out
	p := Produced{DatasetLines: make([]int, len(r.datasets))}
	if out.mode == copyLines {
		stop := r.stop
		if stop == nil {
			stop = context.Background()
		}
		if err := r.skipAhead(stop, &p); err != nil {
			return Produced{}, err
		}
	}
	if r.mix.begin(r.step) {
		r.rebase()
	}
	var clock batchClock
	clock.start(out.mode == copyLines, r.corpus.mixedCauses)
	for {
		more, err := out.more(p.Lines)
		if err != nil {
			return Produced{}, err
		}
		if !more {
			break
		}
		d, err := r.nextLine(out, p.Lines)
		if err != nil {
			return Produced{}, err
		}
		if d == nil {
			break
		}
		if err := out.describe(p.Lines, d.index); err != nil {
			return Produced{}, err
		}
		p.DatasetLines[d.index]++
		p.Lines++
		clock.line(&p.Cost, r.corpus.datasets[d.index].cause)
	}
	if p.Lines > 0 {
		clock.lines(&p.Cost, r.corpus.datasets[0].cause)
	}
	out.finish(p.Lines, &p)
	p.Weights = r.mix.batchWeights()
	p.Delta = make(Delta, len(r.touched))
	for s := range r.touched {
		p.Delta[state.ShardID{Dataset: s.ds.index, Shard: s.index}] = s.st
		delete(r.touched, s)
	}
	if p.Lines > 0 {
		r.step++
	}
	clock.rest(&p.Cost)
	return p, nil
}

// int32s views a byte slot as tokens; slots are page-aligned.
func int32s(b []byte) []int32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(&b[0])), len(b)/4)
}
