package stream

import (
	"context"
	"fmt"
	"sort"

	"github.com/dataloaderd/dataloaderd/internal/source"
	"github.com/dataloaderd/dataloaderd/internal/state"
	"github.com/dataloaderd/dataloaderd/internal/text"
)

// Corpus is a job's opened datasets, each cut into logical shards. Opening
// reads headers and indices only: cutting shards is a binary search per shard
// over unit offsets, O(shards * log units), whatever the corpus size.
type Corpus struct {
	cfg      Config
	layout   Layout
	datasets []*shardedSource
	fp       state.Fingerprint
	// mixedCauses: its datasets' lines count under more than one cause
	// (cost.go), so a batch's time is taken line by line.
	mixedCauses bool
	// ownRes is the private Resources of a corpus opened without any.
	ownRes *Resources
	// block is the config's blocklist checked against the datasets
	// (blocklist.go); nil: none.
	block *resolvedBlocklist
	// stopReads ends the requests to object storage of the datasets'
	// reads (their Context): at Close, or StopReads.
	stopReads context.CancelFunc
}

// shardedSource is one dataset of a corpus: its source, cut into the
// corpus's logical shards.
type shardedSource struct {
	index  int
	name   string
	src    source.Source
	shards []*shard
	// lazy: unit lengths are known only by tokenizing (text formats).
	lazy bool
	// cause is what the time of its lines counts as (cost.go).
	cause Cause
	// The source's optional abilities, found once at open (abilities.go).
	abilities
	// blocked is the dataset's part of the blocklist; nil: none.
	blocked *blockedUnits
}

// OpenCorpus validates cfg, opens its datasets and cuts their shards. Text
// datasets get resources of their own (one worker per core, a 256 MiB
// cache); a daemon shares one Resources with OpenCorpusWith.
func OpenCorpus(cfg Config) (*Corpus, error) { return OpenCorpusWith(cfg, nil) }

// OpenCorpusWith is OpenCorpus with the tokenizers, workers and cache of res
// for text datasets; res may be nil.
func OpenCorpusWith(cfg Config, res *Resources) (*Corpus, error) {
	return OpenCorpusContext(context.Background(), cfg, res)
}

// OpenCorpusContext is OpenCorpusWith for a request: opening fails with
// ctx's error when ctx ends first (the client gone, the daemon stopping),
// however long the datasets' listings, HEADs and reads in object storage
// would have taken (throttled, retried). Once open, the corpus's reads of
// objects no longer depend on ctx: they end at Close or StopReads.
func OpenCorpusContext(ctx context.Context, cfg Config, res *Resources) (*Corpus, error) {
	checked, err := Check(cfg)
	if err != nil {
		return nil, err
	}
	return OpenChecked(ctx, checked, res)
}

// OpenChecked is OpenCorpusContext for a config already checked (the
// daemon's open checks it once, before anything is opened).
func OpenChecked(ctx context.Context, checked Checked, res *Resources) (*Corpus, error) {
	reads, stopReads := context.WithCancel(context.Background())
	detach := context.AfterFunc(ctx, stopReads)
	c, err := openCorpus(reads, checked, res)
	if err == nil && !detach() {
		c.Close() // ctx ended as the open did: its reads are ended too
		c, err = nil, ctx.Err()
	}
	if err != nil {
		detach()
		stopReads()
		return nil, err
	}
	c.stopReads = stopReads
	return c, nil
}

// openCorpus opens the config's datasets, whose requests to object storage
// end with reads.
func openCorpus(reads context.Context, checked Checked, res *Resources) (*Corpus, error) {
	cfg := checked.Config()
	c := &Corpus{cfg: cfg, layout: checked.Layout()}
	for _, f := range checked.formats {
		if f.Text && res == nil {
			c.ownRes = NewResources(0, 256<<20, nil)
			res = c.ownRes
			break
		}
	}
	c.fp = state.Fingerprint{
		SeqLen: cfg.SeqLen, LogicalShards: cfg.LogicalShards, Seed: cfg.Seed,
		EOS: cfg.EOS, BOS: cfg.BOS, ShuffleWindow: uint32(cfg.Window()), RunTokens: cfg.RunTokens,
	}
	for i, d := range cfg.Datasets {
		f := checked.formats[i]
		textual := f.Text
		src, tokID, err := f.open(reads, cfg, d, f.Format, res)
		if err != nil {
			c.Close()
			return nil, err
		}
		ds := &shardedSource{index: i, name: d.Name, src: src, lazy: textual, cause: causeOf(d.Path, textual),
			abilities: abilitiesOf(src)}
		c.datasets = append(c.datasets, ds)
		c.mixedCauses = c.mixedCauses || ds.cause != c.datasets[0].cause
		if err := ds.readInRuns(cfg); err != nil { // runs.go
			c.Close()
			return nil, err
		}
		if err := ds.cut(cfg); err != nil {
			c.Close()
			return nil, err
		}
		if ds.offsets != nil {
			// A cut from an offset that could not be read would differ
			// from the next run's.
			if err := ds.offsets.OffsetError(); err != nil {
				c.Close()
				return nil, err
			}
		}
		files := src.Files()
		paths := make([]string, len(files))
		sizes := make([]int64, len(files))
		var bytes int64
		for j, f := range files {
			paths[j], sizes[j] = f.Path, f.Size
			bytes += f.Size
		}
		dp := state.DatasetPrint{
			Name: d.Name, Format: d.Format, Files: len(files), Bytes: bytes,
			Units: src.Units(), Digest: state.FileDigest(paths, sizes),
			Field: d.Field, Tokenizer: tokID,
		}
		if textual {
			dp.OnBadRecord = d.OnBadRecord
		}
		c.fp.Datasets = append(c.fp.Datasets, dp)
	}
	block, err := c.resolveBlocklist(res.roots())
	if err != nil {
		c.Close()
		return nil, err
	}
	if c.block = block; block != nil {
		for i, d := range c.datasets {
			d.blocked = block.byDataset[i]
		}
	}
	return c, nil
}

// cut divides the dataset's units into cfg.LogicalShards contiguous runs of
// about equal tokens: shard k starts at the first unit whose offset reaches
// k/S of the tokens.
func (d *shardedSource) cut(cfg Config) error {
	n := d.src.Units()
	total := d.src.Tokens()
	s := uint64(cfg.LogicalShards)
	bounds := make([]uint64, s+1)
	bounds[s] = n
	if n < s {
		what := "documents or blocks"
		if d.lazy {
			what = "blocks of a plain JSONL file, compressed JSONL files, or Parquet row groups"
		}
		return fmt.Errorf("%w: dataset %q has %d units (%s), fewer than logical_shards (%d); lower logical_shards",
			ErrInvalidConfig, d.name, n, what, s)
	}
	if d.offsetsAhead != nil {
		// Where the searches below start, and where the shards' runs
		// will end: fetched together, before they probe (runs.go).
		starts, ends := cutGuesses(n, total, s, cfg.RunTokens)
		d.offsetsAhead.PrefetchOffsets(append(starts, ends...))
	}
	for k := uint64(1); k < s; k++ {
		target := mulDiv(total, k, s)
		b := searchOffset(d.src, bounds[k-1], n, target)
		// Every shard gets at least one unit, even where one long document
		// spans several token targets.
		bounds[k] = min(max(b, bounds[k-1]+1), n-(s-k))
	}
	for k := uint64(0); k < s; k++ {
		lo, hi := bounds[k], bounds[k+1]
		sh := &shard{
			ds: d, index: uint32(k), lo: lo, n: hi - lo, tokens: d.src.Offset(hi) - d.src.Offset(lo),
			key: key(cfg.Seed, uint64(d.index), k),
		}
		if d.grouper != nil {
			if runs := d.grouper.Groups(lo, hi); len(runs) > 0 {
				sh.order = newGroupOrder(lo, hi-lo, runs)
			}
		}
		// A shard whose units are all empty (flat-file blocks inside one long
		// document) has nothing to serve; it must never be asked for a line.
		// Text units are not looked at: their lengths are only known by
		// tokenizing them, which opening must not do (a shard of them that
		// turns out empty fails when it is read, see walk).
		if !d.lazy {
			empty, err := sh.empty()
			if err != nil {
				return err
			}
			if empty {
				sh.tokens = 0
			}
		}
		d.shards = append(d.shards, sh)
	}
	return nil
}

// searchOffset returns the first unit in [lo, hi] whose offset reaches
// target (hi when none before it does; Offset(Units()) is the token count).
// Offsets grow about linearly with the unit, so it guesses by interpolation,
// then gallops from the guess (steps 1, 2, 4, ...) until it brackets the
// answer, and bisects the bracket: a few probes, all near the guess, where
// a bisection of the whole range would take log2(units) probes spread over
// the index, each a page of a large index touched before the first batch.
func searchOffset(src interface{ Offset(uint64) uint64 }, lo, hi, target uint64) uint64 {
	if lo >= hi {
		return lo
	}
	g := lo + (hi-lo)/2
	if olo, ohi := src.Offset(lo), src.Offset(hi); ohi > olo && target > olo {
		frac := float64(target-olo) / float64(ohi-olo)
		g = lo + uint64(frac*float64(hi-lo))
	}
	g = min(max(g, lo), hi-1)
	if src.Offset(g) >= target {
		// The answer is in [lo, g]: gallop down.
		top := g
		for step := uint64(1); ; step *= 2 {
			if top-lo <= step {
				hi = top
				break
			}
			probe := top - step
			if src.Offset(probe) < target {
				lo, hi = probe+1, top
				break
			}
			top = probe
		}
	} else {
		// The answer is in (g, hi]: gallop up.
		bottom := g
		for step := uint64(1); ; step *= 2 {
			if hi-bottom <= step {
				lo = bottom + 1
				break
			}
			probe := bottom + step
			if src.Offset(probe) >= target {
				lo, hi = bottom+1, probe
				break
			}
			bottom = probe
		}
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		if src.Offset(mid) >= target {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// mulDiv returns a*b/c without overflow for the sizes at hand (a up to 2^64/2^32).
func mulDiv(a, b, c uint64) uint64 {
	return a/c*b + a%c*b/c
}

// Fingerprint identifies the corpus and the stream-shaping config.
func (c *Corpus) Fingerprint() state.Fingerprint { return c.fp }

// Config is the config the corpus was opened with.
func (c *Corpus) Config() Config { return c.cfg }

// Layout is the slot layout of the config's batches, laid out once when
// the config was checked.
func (c *Corpus) Layout() Layout { return c.layout }

// DatasetNames lists the datasets in config order.
func (c *Corpus) DatasetNames() []string {
	n := make([]string, len(c.datasets))
	for i, d := range c.datasets {
		n[i] = d.name
	}
	return n
}

// Close unmaps every dataset.
func (c *Corpus) Close() error {
	c.StopReads()
	var first error
	for _, d := range c.datasets {
		if err := d.src.Close(); err != nil && first == nil {
			first = err
		}
	}
	if c.ownRes != nil {
		c.ownRes.Close()
	}
	return first
}

// StopReads ends the reads of the corpus's objects, those waiting on the
// store and those to come (they fail with context.Canceled): for a corpus
// no session will read again, whose producers are stopping. Close does it.
func (c *Corpus) StopReads() {
	if c.stopReads != nil {
		c.stopReads()
	}
}

// CompressedStats describes a text dataset's compressed JSONL files.
type CompressedStats struct {
	text.CompressedStats
	// MostShards is the most logical shards one compressed file is cut
	// across. Each of them decompresses the file from its start up to its
	// own part, once per epoch and per resume: with a file over many shards
	// that costs about MostShards/2 decompressions of the file each time.
	MostShards int
}

// Compressed describes the compressed JSONL files of each text dataset
// that has some, by dataset name: how many, how many lack a usable size
// hint (each is one unit, tokenized whole: worth a warning), how many times
// decoding started at a file's beginning, and across how many shards the
// most shared file is cut (also worth a warning when large).
func (c *Corpus) Compressed() map[string]CompressedStats {
	out := map[string]CompressedStats{}
	for _, d := range c.datasets {
		if d.compressed == nil {
			continue
		}
		st := CompressedStats{CompressedStats: d.compressed.Compressed()}
		if st.Files == 0 {
			continue
		}
		if g := d.ownGroups(); g != nil { // without run_tokens' runs (runs.go)
			for _, run := range g.Groups(0, d.src.Units()) {
				st.MostShards = max(st.MostShards, d.shardOf(run[1]-1)-d.shardOf(run[0])+1)
			}
		}
		out[d.name] = st
	}
	return out
}

// shardOf is the index of the shard holding unit u.
func (d *shardedSource) shardOf(u uint64) int {
	return sort.Search(len(d.shards), func(k int) bool { return d.shards[k].lo+d.shards[k].n > u })
}

// Skipped is the number of bad records the corpus's text datasets skipped so
// far, by dataset name (datasets that skip none are left out).
func (c *Corpus) Skipped() map[string]uint64 {
	out := map[string]uint64{}
	for _, d := range c.datasets {
		if d.skips != nil {
			if n := d.skips.Skipped(); n > 0 {
				out[d.name] = n
			}
		}
	}
	return out
}
