package stream

import (
	"context"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/source"
)

// opener opens a dataset of a checked config as a source.Source, and
// names its tokenizer (text formats) for the fingerprint; its requests to
// object storage end with ctx.
type opener func(ctx context.Context, cfg Config, d Dataset, f files.Format, res *Resources) (source.Source, string, error)

// format is a dataset format as a corpus opens it: the file layer's entry
// (what the format is, its files, its default field) and its opener, the
// one entry point through which a dataset of any format becomes a source.
type format struct {
	files.Format
	open opener
}

// openers holds each format's opener, by name: the token formats are read
// by package source, the text formats by package text and tokenized on
// the fly with a daemon's Resources. Every format of the file layer's
// registry has one (TestEveryFormatOpens).
var openers = map[string]opener{
	files.Megatron: openTokens,
	files.Tokens:   openTokens,
	files.Arrow:    openTokens,
	files.Parquet:  openText,
	files.JSONL:    openText,
}

// lookupFormat returns the format of a name with its opener, and whether
// there is one: the config's check looks each dataset's up once, and the
// corpus and the readers below it are given the format, not its name.
func lookupFormat(name string) (format, bool) {
	f, ok := files.Lookup(name)
	if !ok || openers[name] == nil {
		return format{}, false
	}
	return format{Format: f, open: openers[name]}, true
}

// openSource opens a token dataset; tests replace it to count what opening
// reads.
var openSource = source.OpenFormat

// unitsPerShard is the fewest units a dataset cut in blocks (flat token
// files, plain JSONL) gets per logical shard: its block size shrinks below
// the default until it has them.
const unitsPerShard = 4

// openTokens opens a dataset of token ids. Flat token files are opened a
// second time with smaller blocks when the default gives too few units for
// the shards; the block size is then a function of the file sizes and
// logical_shards, both in the fingerprint, so every run and rank agrees on
// the units.
func openTokens(ctx context.Context, cfg Config, d Dataset, f files.Format, res *Resources) (source.Source, string, error) {
	spec := source.Spec{Name: d.Name, Path: d.Path, Format: d.Format, Dtype: d.Dtype, EOS: cfg.EOS, Column: d.Field,
		Roots: res.roots(), Context: ctx}
	spec.OffsetProbes = func(units, tokens uint64) (entries, offsets []uint64) { // runs.go
		return cutGuesses(units, tokens, uint64(cfg.LogicalShards), cfg.RunTokens)
	}
	src, err := openSource(f, spec)
	if err != nil || !src.Delimited() {
		return src, "", err
	}
	want := uint64(cfg.LogicalShards) * unitsPerShard
	if src.Units() >= want {
		return src, "", nil
	}
	spec.BlockTokens = max(1, src.Tokens()/want)
	src.Close()
	src, err = openSource(f, spec)
	return src, "", err
}

// openText opens a text dataset tokenized on the fly, with res's
// tokenizers, workers and cache (see Resources.openText).
func openText(ctx context.Context, cfg Config, d Dataset, f files.Format, res *Resources) (source.Source, string, error) {
	return res.openText(ctx, cfg, d, f)
}
