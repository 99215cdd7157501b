// Package prepare converts raw-text corpora (JSONL, Parquet) into Megatron
// indexed datasets with a tokenizer: one .bin/.idx pair per input file,
// tokenized on every core, written atomically so that a run that was
// interrupted resumes without redoing the files it finished.
package prepare

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/dataloaderd/dataloaderd/internal/source"
	"github.com/dataloaderd/dataloaderd/internal/text"
)

// Encoder is the tokenizer: Encode appends text's tokens to dst.
type Encoder interface {
	Encode(dst []int32, text []byte) []int32
}

// Config is one prepare run.
type Config struct {
	// Input names the text files: a file, a directory or a glob (as a
	// dataset path of the same format).
	Input  string
	Format string // "jsonl" or "parquet"
	Field  string // text column or field; empty: "text"
	// OnBadRecord is "" / "error" (stop at the first bad record) or "skip".
	OnBadRecord string
	Encoder     Encoder
	// Tokenizer names the encoder as the user gave it (an encoding name or a
	// file), and TokenizerSHA256 is its content hash (see
	// tokenize.Tokenizer.SHA256): each output's record holds both.
	Tokenizer       string
	TokenizerSHA256 string
	// MaxID is the largest token id the encoder makes: below 65536 the
	// outputs store uint16 tokens, else int32.
	MaxID int32
	// AppendEOS, when EOS >= 0, ends every document with EOS (Megatron's
	// --append-eod). dataloaderd adds EOS when it reads a document that lacks
	// one, so it is not needed for dataloaderd itself.
	AppendEOS bool
	EOS       int32
	// Output is the directory of the datasets: <output>/<input name>.{bin,idx}.
	Output  string
	Workers int
	// Force redoes finished outputs that were made with other settings
	// (see Settings) instead of refusing the run.
	Force bool
	// MadeBy names the program in the records, for people.
	MadeBy string
	// Progress, when set, is called about twice a second and once at the end.
	Progress func(Stats)
}

// Stats counts a run's work.
type Stats struct {
	Files, FilesDone, FilesSkipped int
	FilesRedone                    int    // of FilesDone: made with other settings before (Force)
	Bytes, BytesDone               uint64 // input bytes (compressed size for .gz/.zst)
	Documents, Tokens              uint64
	BadRecords                     uint64
	Elapsed                        time.Duration
}

// TokensPerSecond is the tokenizing rate of the run so far.
func (s Stats) TokensPerSecond() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Tokens) / s.Elapsed.Seconds()
}

// Run converts every input file, a file at a time, each file's units
// tokenized by cfg.Workers goroutines and written in order, with a record of
// its settings beside it. A file whose output .idx exists is finished: it
// is skipped when its record holds the settings cfg asks for; when it does
// not, Run refuses with a *MismatchError before converting anything, or,
// with cfg.Force, redoes it.
func Run(ctx context.Context, cfg Config) (Stats, error) {
	if cfg.Workers < 1 {
		cfg.Workers = 1
	}
	if cfg.TokenizerSHA256 == "" {
		return Stats{}, errors.New("the tokenizer's SHA-256 is required, to record what made the outputs")
	}
	all, err := text.Open(text.Spec{Name: "input", Path: cfg.Input, Format: cfg.Format, Field: cfg.Field, OnBadRecord: cfg.OnBadRecord})
	if err != nil {
		return Stats{}, err
	}
	files := all.Files()
	all.Close()
	names, err := outputNames(files)
	if err != nil {
		return Stats{}, err
	}
	if err := os.MkdirAll(cfg.Output, 0o755); err != nil {
		return Stats{}, err
	}
	actions, err := planAll(cfg, names)
	if err != nil {
		return Stats{Files: len(files)}, err
	}
	r := &run{cfg: cfg, start: time.Now()}
	r.stats.Files = len(files)
	for _, f := range files {
		r.stats.Bytes += uint64(f.Size)
	}
	stop := r.report(ctx)
	defer stop()
	for i, f := range files {
		prefix := filepath.Join(cfg.Output, names[i])
		switch actions[i] {
		case toSkip:
			r.mu.Lock()
			r.stats.FilesSkipped++
			r.stats.BytesDone += uint64(f.Size)
			r.mu.Unlock()
			continue
		case toRedo:
			if err := unfinish(prefix); err != nil {
				return r.snapshot(), err
			}
		}
		if err := r.file(ctx, f, prefix); err != nil {
			return r.snapshot(), err
		}
		if actions[i] == toRedo {
			r.mu.Lock()
			r.stats.FilesRedone++
			r.mu.Unlock()
		}
	}
	return r.snapshot(), nil
}

// outputNames gives each input file an output prefix: its base name without
// the format's extensions, unique among the inputs.
func outputNames(files []source.File) ([]string, error) {
	names := make([]string, len(files))
	seen := map[string]string{}
	for i, f := range files {
		n := filepath.Base(f.Path)
		for _, ext := range []string{".gz", ".zst", ".jsonl", ".ndjson", ".parquet"} {
			n = strings.TrimSuffix(n, ext)
		}
		if prev, dup := seen[n]; dup {
			return nil, fmt.Errorf("%w: inputs %s and %s would both be written as %s.bin/.idx; rename one",
				source.ErrInvalid, prev, f.Path, n)
		}
		seen[n] = f.Path
		names[i] = n
	}
	return names, nil
}

type run struct {
	cfg   Config
	start time.Time
	mu    sync.Mutex
	stats Stats
}

func (r *run) snapshot() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Elapsed = time.Since(r.start)
	return s
}

// report calls cfg.Progress every half second until the returned stop.
func (r *run) report(ctx context.Context) (stop func()) {
	if r.cfg.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				r.cfg.Progress(r.snapshot())
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		r.cfg.Progress(r.snapshot())
	}
}

// unitDocs is one unit's documents, tokenized.
type unitDocs struct {
	docs   [][]int32
	tokens uint64
}

// file converts one input file into prefix.{bin,idx}.
func (r *run) file(ctx context.Context, f source.File, prefix string) (err error) {
	var bad atomic.Uint64
	tokensBefore := r.snapshot().Tokens
	ds, err := text.Open(text.Spec{Name: filepath.Base(f.Path), Path: f.Path, Format: r.cfg.Format, Field: r.cfg.Field,
		OnBadRecord: r.cfg.OnBadRecord, OnSkip: func(error) { bad.Add(1) }})
	if err != nil {
		return err
	}
	defer ds.Close()
	w, err := source.NewMegatronWriter(prefix, r.cfg.MaxID)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			w.Abort()
		}
	}()
	n := ds.Units()
	// Units are tokenized by the workers, at most 2 per worker ahead of the
	// writer, and written in order.
	results := make([]chan unitDocs, n)
	for u := range results {
		results[u] = make(chan unitDocs, 1)
	}
	g, gctx := errgroup.WithContext(ctx)
	var next atomic.Uint64
	window := make(chan struct{}, 2*r.cfg.Workers)
	for range r.cfg.Workers {
		g.Go(func() error { return r.tokenizeUnits(gctx, ds, &next, window, results) })
	}
	g.Go(func() error { return r.writeUnits(gctx, w, f, window, results) })
	err = g.Wait()
	if err == nil || errors.Is(err, context.Canceled) {
		// A select on a cancelled context and a ready channel may take
		// either: the workers can finish every unit after the cancel. A
		// cancelled run commits nothing more, whatever they did.
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("interrupted while writing %s (finished files are kept; run again to go on): %w", prefix, cerr)
		}
	}
	if err != nil {
		return err
	}
	if err := writeRecord(prefix, r.recordOf(f, w.Documents(), r.snapshot().Tokens-tokensBefore, bad.Load())); err != nil {
		return err
	}
	if err := w.Commit(); err != nil {
		return err
	}
	r.mu.Lock()
	r.stats.FilesDone++
	r.stats.BadRecords += bad.Load()
	r.stats.BytesDone += uint64(f.Size) - uint64(f.Size)/max(n, 1)*n
	r.mu.Unlock()
	return nil
}

// tokenizeUnits is one worker of file: it takes the next unit, once the
// window has room, tokenizes its documents and hands them to results[u],
// until no unit is left.
func (r *run) tokenizeUnits(ctx context.Context, ds text.Dataset, next *atomic.Uint64, window chan struct{}, results []chan unitDocs) error {
	n := ds.Units()
	for {
		select {
		case window <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		u := next.Add(1) - 1
		if u >= n {
			return nil
		}
		var ud unitDocs
		err := ds.Docs(u, func(t []byte) error {
			doc := r.cfg.Encoder.Encode(nil, t)
			if r.cfg.AppendEOS && (len(doc) == 0 || doc[len(doc)-1] != r.cfg.EOS) {
				doc = append(doc, r.cfg.EOS)
			}
			ud.docs = append(ud.docs, doc)
			ud.tokens += uint64(len(doc))
			return nil
		})
		if err != nil {
			return err
		}
		results[u] <- ud
	}
}

// writeUnits is the writer of file: it adds the units' documents to w in
// order, freeing a window slot for each, and counts them.
func (r *run) writeUnits(ctx context.Context, w *source.MegatronWriter, f source.File, window chan struct{}, results []chan unitDocs) error {
	n := uint64(len(results))
	for u := uint64(0); u < n; u++ {
		var ud unitDocs
		select {
		case ud = <-results[u]:
		case <-ctx.Done():
			return ctx.Err()
		}
		<-window
		for _, d := range ud.docs {
			if err := w.Add(d); err != nil {
				return err
			}
		}
		r.mu.Lock()
		r.stats.Documents += uint64(len(ud.docs))
		r.stats.Tokens += ud.tokens
		if n > 0 {
			r.stats.BytesDone += uint64(f.Size) / n
		}
		r.mu.Unlock()
	}
	return nil
}
