package stream

import (
	"fmt"
	"sort"

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
func (t tokenRuns) Groups(lo, hi uint64) [][2]uint64 {
	var runs [][2]uint64
	for a := lo; a < hi; {
		target := t.src.Offset(a) + t.tokens
		// The first unit after a whose offset reaches target ends the run.
		n := hi - a - 1
		b := a + 1 + uint64(sort.Search(int(n), func(i int) bool { return t.src.Offset(a+1+uint64(i)) >= target }))
		if b-a >= 2 {
			runs = append(runs, [2]uint64{a, b})
		}
		a = b
	}
	return runs
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
