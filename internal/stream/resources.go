package stream

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/source"
	"github.com/dataloaderd/dataloaderd/internal/text"
	"github.com/dataloaderd/dataloaderd/internal/tokenize"
)

// Resources are what the text datasets of a daemon share: tokenizers, each
// loaded once; a pool of workers that tokenizes units ahead of demand; and a
// bounded cache of tokenized units. Safe for concurrent use.
type Resources struct {
	// TokenizerDirs are searched for the rank files of built-in encodings,
	// before $DATALOADERD_TOKENIZERS.
	TokenizerDirs []string
	// OnSkip, when set, is told of every bad record a dataset skips.
	OnSkip func(dataset string, err error)
	// Roots confines the files datasets open (their data, and tokenizer
	// files named by path); nil confines nothing. The built-in encodings
	// of TokenizerDirs are the operator's own and are read as they are.
	Roots *files.Roots

	pool  *text.Pool
	cache *text.Cache

	mu   sync.Mutex
	toks map[string]loadedTokenizer
}

type loadedTokenizer struct {
	tok text.Encoder
	id  string
}

// NewResources starts a pool of workers (0: one per core) and a cache of
// cacheBytes of tokenized units.
func NewResources(workers int, cacheBytes int64, tokenizerDirs []string) *Resources {
	if workers <= 0 {
		workers = runtime.NumCPU()
	}
	return &Resources{
		TokenizerDirs: tokenizerDirs,
		pool:          text.NewPool(workers),
		cache:         text.NewCache(cacheBytes),
		toks:          map[string]loadedTokenizer{},
	}
}

// CacheStats reports the tokenized-unit cache, for metrics.
func (r *Resources) CacheStats() text.CacheStats { return r.cache.Stats() }

// Close stops the workers.
func (r *Resources) Close() { r.pool.Close() }

// tokenizer loads (once) the tokenizer a dataset names (see tokenize.Load)
// and returns it with its identity for the fingerprint.
func (r *Resources) tokenizer(dataset, spec string) (text.Encoder, string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.toks[spec]; ok {
		return t.tok, t.id, nil
	}
	// A tokenizer file the job names by path is read through the roots.
	read := os.ReadFile
	if strings.ContainsRune(spec, filepath.Separator) {
		what := fmt.Sprintf("dataset %q tokenizer", dataset)
		read = func(path string) ([]byte, error) { return r.Roots.ReadFile(what, path) }
	}
	tok, id, err := tokenize.LoadWith(read, spec, r.TokenizerDirs...)
	if outside := (*files.OutsideError)(nil); errors.As(err, &outside) {
		return nil, "", outside
	}
	if err != nil {
		return nil, "", fmt.Errorf("%w: dataset %q: tokenizer %q: %w", source.ErrInvalid, dataset, spec, err)
	}
	r.toks[spec] = loadedTokenizer{tok: tok, id: id}
	return tok, id, nil
}

// addTokenizer makes name resolve to enc (tests).
func (r *Resources) addTokenizer(name string, enc text.Encoder) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.toks[name] = loadedTokenizer{tok: enc, id: "test:" + name}
}

// textBlockBytes is the unit size of plain JSONL files. Small units cost
// little (a line search at each end) and bound two things: the first batch
// of a shard waits for its first unit to be tokenized (about 64 k tokens
// here), and every shard a rank reads keeps its current unit tokenized in
// the cache (about 256 KiB of tokens per unit), so 8 ranks of 64 shards need
// about 128 MiB.
var textBlockBytes uint64 = 256 << 10 // tests lower it

// textBlockFloor is the smallest block openText shrinks to.
const textBlockFloor = 4096

// openText opens a text dataset tokenized on the fly. Plain JSONL files are
// opened again with smaller blocks when the default gives too few units for
// the shards; the block size is then a function of the file sizes and
// logical_shards, both in the fingerprint, so every run agrees on the units.
// Its requests to object storage end with ctx.
func (r *Resources) openText(ctx context.Context, cfg Config, d Dataset, f files.Format) (source.Source, string, error) {
	tok, id, err := r.tokenizer(d.Name, d.Tokenizer)
	if err != nil {
		return nil, "", err
	}
	// A shard reads one compressed file at a time, so two decoders per
	// logical shard leave room for a file shared by two shards and for
	// the decoders left behind where a shard's part of a file ends.
	spec := text.Spec{Name: d.Name, Path: d.Path, Format: d.Format, Field: d.Field, OnBadRecord: d.OnBadRecord,
		BlockBytes: textBlockBytes, Decoders: max(text.DefaultDecoders, 2*int(cfg.LogicalShards)), Roots: r.Roots,
		Context: ctx}
	if r.OnSkip != nil {
		name := d.Name
		spec.OnSkip = func(err error) { r.OnSkip(name, err) }
	}
	ds, err := text.OpenFormat(f, spec)
	if err != nil {
		return nil, "", err
	}
	want := uint64(cfg.LogicalShards) * unitsPerShard
	if f.Name == files.JSONL && ds.Units() < want {
		spec.BlockBytes = max(textBlockFloor, ds.Bytes()/want)
		ds.Close()
		if ds, err = text.OpenFormat(f, spec); err != nil {
			return nil, "", err
		}
	}
	frame := text.Framing{EOS: int32(cfg.EOS), BOS: int32(max(cfg.BOS, 0)), HasBOS: cfg.BOS >= 0}
	return text.Tokenized(ds, tok, frame, r.cache, r.pool), id, nil
}

// roots is r.Roots, or none when r is nil.
func (r *Resources) roots() *files.Roots {
	if r == nil {
		return nil
	}
	return r.Roots
}
