package stream

import (
	"fmt"

	"github.com/dataloaderd/dataloaderd/internal/source"
)

// MaxRunTokens bounds run_tokens: 2^40 tokens, far past any shard.
const MaxRunTokens = 1 << 40

// tokenRuns groups a source's units into runs of consecutive units of
// about tokens tokens each (Config.RunTokens), so that a shard permutes
// its runs and reads each run's units in order (groupOrder): a window then
// reads a few contiguous spans of its files instead of documents from all
// over the shard, and a cache of blocks reads each byte about once however
// small the documents. A run starts at a unit and ends at the first unit
// whose offset is run tokens or more past its start; the cut depends on
// offsets and run_tokens alone, so every world size and every resume cuts
// the same runs.
type tokenRuns struct {
	src    source.Source
	tokens uint64
}

// Groups returns the runs of two or more units in [lo, hi), in order.
// Each run's end is found by searchOffset (a guess by interpolation, then
// a few probes near it): offsets grow about linearly, so the probes of
// one run stay in a block or two of a Megatron index, where a bisection
// of the rest of the shard would touch a dozen blocks, one after the
// other, each a GET before the first batch when the index is in object
// storage.
func (t tokenRuns) Groups(lo, hi uint64) [][2]uint64 {
	var runs [][2]uint64
	for a := lo; a < hi; {
		// The first unit after a whose offset reaches target ends the run.
		b := searchOffset(t.src, a+1, hi, t.src.Offset(a)+t.tokens)
		if b-a >= 2 {
			runs = append(runs, [2]uint64{a, b})
		}
		a = b
	}
	return runs
}

// guessRunEnds guesses where runs of runTokens tokens of units [lo, hi)
// end, for a source of units units and tokens tokens, from its mean unit
// (no offset is read for it): the units whose offsets Groups will probe
// first, for a source in object storage to fetch together before it
// searches. At most maxGuesses of them; none when runTokens is 0.
func guessRunEnds(lo, hi, units, tokens, runTokens uint64) []uint64 {
	const maxGuesses = 1 << 12
	if hi <= lo || tokens == 0 || runTokens == 0 {
		return nil
	}
	step := max(1, uint64(float64(runTokens)*float64(units)/float64(tokens)))
	var at []uint64
	for u := lo + step; u < hi && len(at) < maxGuesses; u += step {
		at = append(at, u)
	}
	return at
}

// cutGuesses guesses the units whose offsets cutting a source of units
// units and tokens tokens into shards logical shards, and those into runs
// of runTokens (0: none), reads first: starts, near k/shards of the units
// when units are about equal, where the shards' searches start (and whose
// entries their first reads read), and ends, where each shard's runs will
// end, guessed from those bounds. A source in object storage fetches
// their index entries together before the searches probe them
// (PrefetchOffsets), or with its header (source.Spec.OffsetProbes).
func cutGuesses(units, tokens, shards, runTokens uint64) (starts, ends []uint64) {
	starts = make([]uint64, shards)
	for k := range starts {
		starts[k] = mulDiv(units, uint64(k), shards)
	}
	for k := range shards {
		ends = append(ends, guessRunEnds(mulDiv(units, k, shards), mulDiv(units, k+1, shards), units, tokens, runTokens)...)
	}
	return starts, ends
}

// MinRunTokens is the least run_tokens: runs are a shard's items, each
// costing about 56 bytes of tables (groupOrder), so they are kept large.
const MinRunTokens = 4096

// maxRuns bounds the runs of one dataset (about 56 bytes each).
const maxRuns = 1 << 24

// readInRuns makes the dataset's units read in runs of cfg.RunTokens
// tokens, when set. A source that groups units itself (the units of a
// compressed JSONL file) keeps its runs, and the units between them are
// cut into runs of tokens.
func (d *shardedSource) readInRuns(cfg Config) error {
	if cfg.RunTokens == 0 {
		return nil
	}
	if runs := d.src.Tokens() / cfg.RunTokens; runs > maxRuns {
		return fmt.Errorf("%w: dataset %q: run_tokens %d cuts its %d tokens into %d runs, more than %d: raise run_tokens",
			ErrInvalidConfig, d.name, cfg.RunTokens, d.src.Tokens(), runs, maxRuns)
	}
	byTokens := tokenRuns{src: d.src, tokens: cfg.RunTokens}
	if d.grouper == nil {
		d.grouper = byTokens
	} else {
		d.grouper = bothRuns{own: d.grouper, byTokens: byTokens}
	}
	return nil
}

// bothRuns is the runs of a source that groups some units itself, and
// runs of tokens between them.
type bothRuns struct {
	own      unitGrouper
	byTokens tokenRuns
}

// Groups returns the source's runs in [lo, hi), and runs of tokens cut
// between them, in order.
func (b bothRuns) Groups(lo, hi uint64) [][2]uint64 {
	var out [][2]uint64
	at := lo
	for _, r := range b.own.Groups(lo, hi) {
		out = append(out, b.byTokens.Groups(at, r[0])...)
		out = append(out, r)
		at = r[1]
	}
	return append(out, b.byTokens.Groups(at, hi)...)
}

// ownGroups is the source's own grouper: the runs of its compressed
// files, without the runs of tokens.
func (d *shardedSource) ownGroups() unitGrouper {
	switch g := d.grouper.(type) {
	case bothRuns:
		return g.own
	case tokenRuns:
		return nil
	}
	return d.grouper
}
