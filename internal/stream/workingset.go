package stream

import (
	"math"
	"strings"

	"github.com/dataloaderd/dataloaderd/internal/source"
	"github.com/dataloaderd/dataloaderd/internal/state"
)

// WorkingSet is what ranks keep in a node's object cache at once: every
// shard they own has its line-shuffle window open and the next one fetched
// ahead, and each window is read in the keyed order of its lines, so its
// bytes are needed until its last line is out. A cache that holds less
// evicts a window's bytes before they are read. Only the bytes of datasets
// in object storage go through the cache.
type WorkingSet struct {
	// Datasets is each dataset's part, in config order.
	Datasets []DatasetWorkingSet
	// Bytes sums the datasets in object storage; AllBytes every dataset,
	// as though all were (what `dataloaderd plan` shows for local paths).
	Bytes, AllBytes int64
	// RunTokens is the job's run_tokens (0: units read one by one).
	RunTokens uint64
}

// DatasetWorkingSet is one dataset's part of a working set.
type DatasetWorkingSet struct {
	Name      string `json:"name"`
	InObjects bool   `json:"in_object_storage"`
	// Shards is how many of its shards the ranks own.
	Shards int `json:"shards"`
	// WindowBytes is the cache one window of a shard takes, on average:
	// its tokens' bytes, and for each unit it reads the part of a cache
	// block beside it (a span at a random offset covers one block more
	// than its length).
	WindowBytes int64 `json:"window_bytes"`
	// IndexBytes are what the windows read of the indices, which are read
	// by range: a block beside each span of units, at most the whole index
	// (Megatron .idx files).
	IndexBytes int64 `json:"index_bytes"`
	// Bytes is the dataset's part: its index, and for every shard owned
	// its window and the next or the units fetched ahead, at most the
	// shard's bytes.
	Bytes int64 `json:"working_set_bytes"`
	// DataBytes are the dataset's token bytes (its files but the indices),
	// and UnitBytes those of its mean unit (document).
	DataBytes int64 `json:"data_bytes"`
	UnitBytes int64 `json:"mean_unit_bytes"`
}

// Refetched reports whether an epoch of the dataset, read through a cache
// of cache bytes, fetches about a block per unit rather than each byte
// about once: its units are read one by one in a shuffled order (no
// run_tokens) and its data does not fit the cache, so a block is evicted
// between the reads of the units in it. Only runs bound what an epoch
// fetches then (docs/objects.md, "Reading in runs").
func (d DatasetWorkingSet) Refetched(runTokens uint64, cache int64) bool {
	return runTokens == 0 && d.DataBytes+d.IndexBytes > cache
}

// WorkingSet is the working set of ranks (of a world of dpSize) in a cache
// of blockBytes blocks: per dataset, its index, and for each shard the
// ranks own, its open window (window_lines x line_tokens tokens of the
// shard's stream) and the next one, or the units fetched ahead of it when
// more (the rank's prefetch depth shared among its shards, at most 64 a
// shard). How many units that is comes from the shard's mean unit length;
// with run_tokens, they are a span of each run they reach into.
func (c *Corpus) WorkingSet(ranks []uint32, dpSize uint32, blockBytes int64) WorkingSet {
	ws := WorkingSet{RunTokens: c.cfg.RunTokens}
	windowTokens := c.cfg.Window() * uint64(c.cfg.LineTokens())
	for i, d := range c.datasets {
		dw := DatasetWorkingSet{Name: d.name, InObjects: d.ahead > 0}
		data, index := d.bytes(c.cfg.Datasets[i].Format)
		dw.DataBytes = data
		if n := d.src.Units(); n > 0 {
			dw.UnitBytes = data / int64(n)
		}
		var indexSpans int64
		bpt := 0.0
		if t := d.src.Tokens(); t > 0 {
			bpt = float64(data) / float64(t)
		}
		// Units read in runs (runs.go) are contiguous: a window is a few
		// spans of its files, a block beside each.
		run := c.cfg.RunTokens
		var windows int64
		depth := d.ahead
		if depth == 0 { // a local dataset, planned as though in object storage
			depth = source.ObjectPrefetchUnits
		}
		for _, r := range ranks {
			lo, hi := state.Owned(r, dpSize, c.cfg.LogicalShards)
			// A rank's depth is shared among its shards (prefetchNext).
			ahead := min(max(4, depth/max(uint64(hi-lo), 1)), maxPrefetchAhead)
			for k := lo; k < hi && int(k) < len(d.shards); k++ {
				w, b, spans := d.shards[k].windowBytes(windowTokens, ahead, run, bpt, blockBytes)
				dw.Shards++
				windows += w
				dw.Bytes += b
				indexSpans += int64(spans)
			}
		}
		// The index is read by range (source/megatronidx.go): the entries
		// of the units the windows read, a block beside each span of them,
		// at most the whole index.
		dw.IndexBytes = min(indexSpans*blockBytes, index)
		dw.Bytes += dw.IndexBytes
		if dw.Shards > 0 {
			dw.WindowBytes = windows / int64(dw.Shards)
		}
		ws.AllBytes += dw.Bytes
		if dw.InObjects {
			ws.Bytes += dw.Bytes
		}
		ws.Datasets = append(ws.Datasets, dw)
	}
	return ws
}

// bytes are the sizes of a dataset's files: its token data, and its
// indices (a Megatron dataset's .idx files, read by range).
func (d *shardedSource) bytes(format string) (data, index int64) {
	for _, f := range d.src.Files() {
		if format == "megatron" && strings.HasSuffix(f.Path, ".idx") {
			index += f.Size
		} else {
			data += f.Size
		}
	}
	return data, index
}

// windowBytes is the cache one window of the shard takes, and the shard's
// part of a working set: its open window, and the next one or the units
// the shard asks to be fetched ahead of it (prefetchAhead), whichever is
// more; at most the shard's own bytes (with a block at each end). Units in
// runs (run > 0) are contiguous: a span per run reached, a block beside
// each; otherwise a block beside each unit.
func (s *shard) windowBytes(windowTokens, aheadUnits, run uint64, bpt float64, block int64) (window, part int64, spans uint64) {
	if s.tokens == 0 || s.n == 0 {
		return 0, 0, 0
	}
	mean := float64(s.tokens) / float64(s.n)
	tokens := min(windowTokens, s.tokens)
	// The units of a window: its tokens over the mean unit, and the one
	// it starts inside.
	units := min(uint64(math.Ceil(float64(tokens)/mean))+1, s.n)
	window, wSpans := spanBytes(tokens, units, run, bpt, block)
	aUnits := min(aheadUnits, s.n)
	ahead, aSpans := spanBytes(min(uint64(float64(aUnits)*mean), s.tokens), aUnits, run, bpt, block)
	whole := int64(float64(s.tokens)*bpt) + 2*block
	if ahead <= window {
		aSpans = wSpans
	}
	return window, min(window+max(window, ahead), whole), wSpans + aSpans
}

// spanBytes is the cache units holding tokens take: their bytes, and a
// block beside each contiguous span of them; and how many spans.
func spanBytes(tokens, units, run uint64, bpt float64, block int64) (int64, uint64) {
	spans := units
	if run > 0 {
		spans = min(units, (tokens+run-1)/run+1)
	}
	return int64(float64(tokens)*bpt) + int64(spans)*block, spans
}
