package stream

import (
	"math"
	"strings"

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
	// IndexBytes are the indices held whole while the dataset is open
	// (Megatron .idx files).
	IndexBytes int64 `json:"index_bytes"`
	// Bytes is the dataset's part: its index, and two windows of every
	// shard owned (at most the shard's bytes).
	Bytes int64 `json:"working_set_bytes"`
}

// WorkingSet is the working set of ranks (of a world of dpSize) in a cache
// of blockBytes blocks: per dataset, its index, and for each shard the
// ranks own, its open window and the next one, each window_lines x
// line_tokens tokens of the shard's stream. How many units a window reads
// comes from the shard's mean unit length; with run_tokens, a window reads
// a span of each run it reaches into.
func (c *Corpus) WorkingSet(ranks []uint32, dpSize uint32, blockBytes int64) WorkingSet {
	var ws WorkingSet
	windowTokens := c.cfg.Window() * uint64(c.cfg.LineTokens())
	for i, d := range c.datasets {
		dw := DatasetWorkingSet{Name: d.name, InObjects: d.ahead > 0}
		data, index := d.bytes(c.cfg.Datasets[i].Format)
		dw.IndexBytes = index
		dw.Bytes = index
		bpt := 0.0
		if t := d.src.Tokens(); t > 0 {
			bpt = float64(data) / float64(t)
		}
		// Units read in runs (runs.go) are contiguous: a window is a few
		// spans of its files, a block beside each.
		run := c.cfg.RunTokens
		var windows int64
		for _, r := range ranks {
			lo, hi := state.Owned(r, dpSize, c.cfg.LogicalShards)
			for k := lo; k < hi && int(k) < len(d.shards); k++ {
				w, b := d.shards[k].windowBytes(windowTokens, run, bpt, blockBytes)
				dw.Shards++
				windows += w
				dw.Bytes += b
			}
		}
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
// indices held whole while it is open (a Megatron dataset's .idx files).
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

// windowBytes is the cache one window of the shard takes (window tokens
// at bpt bytes each, and a block beside each unit the window reads), and
// the shard's part of a working set: two windows, at most the shard's own
// bytes (with a block at each end).
func (s *shard) windowBytes(windowTokens, run uint64, bpt float64, block int64) (window, part int64) {
	if s.tokens == 0 || s.n == 0 {
		return 0, 0
	}
	tokens := min(windowTokens, s.tokens)
	// The units of a window: its tokens over the mean unit, and the one
	// it starts inside.
	units := min(uint64(math.Ceil(float64(tokens)*float64(s.n)/float64(s.tokens)))+1, s.n)
	if run > 0 {
		// In runs: a span per run the window reaches into.
		units = min(units, (tokens+run-1)/run+1)
	}
	window = int64(float64(tokens)*bpt) + int64(units)*block
	whole := int64(float64(s.tokens)*bpt) + 2*block
	return window, min(2*window, whole)
}
