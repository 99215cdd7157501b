// Package text reads raw-text corpora (Parquet files with a text column,
// JSONL files plain or compressed with gzip or zstd) as units of whole
// documents, for tokenizing on the fly.
//
// A text dataset is a sequence of units in file order, each a block of whole
// documents: a Parquet row group, a byte block of a plain JSONL file snapped
// to line starts, or the lines of a compressed JSONL file that start in one
// block of its decompressed text (the number of blocks comes from a size
// hint in the file's header; a file without a usable one is one unit).
// Token counts are unknown before tokenizing, so each unit has an
// approximate byte offset instead, for cutting shards balanced by bytes.
// Opening reads file sizes, Parquet footers and compressed files' headers
// (and gzip's last 4 bytes) only: O(files), never O(documents).
//
// A compressed file is decompressed forward by decoders the dataset keeps
// between reads, so its units are best read in order: Groups tells a reader
// which units those are.
//
// Tokenized turns a Dataset into a source.Source whose units are the
// dataset's units tokenized, cached and prefetched on a shared worker pool.
package text

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/source"
)

// Values of Spec.OnBadRecord.
const (
	OnBadRecordError = "error"
	OnBadRecordSkip  = "skip"
)

// DefaultField is the text column or field when Spec.Field is empty.
const DefaultField = files.TextField

// DefaultBlockBytes is the nominal unit size of plain JSONL files when
// Spec.BlockBytes is 0.
const DefaultBlockBytes = 4 << 20

// Spec is what a dataset entry of the job config says about a text corpus.
type Spec struct {
	// Name is the dataset's name in the config, used in errors.
	Name string
	// Path is a file, a directory (its *.parquet files, or its .jsonl and
	// .ndjson files, optionally ending .gz or .zst) or a glob.
	Path string
	// Format is one of the text formats of the registry: files.Parquet or
	// files.JSONL.
	Format string
	// Field is the Parquet column or JSONL field holding the text; empty
	// means "text".
	Field string
	// OnBadRecord is "error" (the default: a bad record fails the read that
	// meets it) or "skip" (bad records are counted and left out).
	OnBadRecord string
	// BlockBytes is the nominal unit size of JSONL files (of their text,
	// decompressed, for compressed files); 0 picks DefaultBlockBytes. Like
	// source.Spec.BlockTokens, it shapes the units, so it must be the same
	// on every run of a job.
	BlockBytes uint64
	// Decoders bounds the idle decoders of compressed JSONL files the
	// dataset keeps open between reads (0 picks DefaultDecoders). A file
	// read while it has none is decompressed again from its start, so give
	// at least one per shard read at once (a zstd decoder holds its window,
	// up to 8 MiB at the usual levels; a gzip one about 100 KiB).
	Decoders int
	// OnSkip, if set, is called once per skipped bad record (the first time
	// its unit is read), with the error it would otherwise have been; for
	// logging. It may be called from several goroutines at once.
	OnSkip func(error)
	// Roots confines the files the dataset may open; nil confines nothing.
	Roots *files.Roots
	// Context bounds the requests to object storage made for the dataset
	// (files.Dataset.Context): its listing, HEADs and opens, and every read
	// of its objects' bytes. Nil is context.Background().
	Context context.Context
}

// Dataset is a text corpus as units of whole documents, concatenated over
// its files in path order. Implementations are safe for concurrent use.
type Dataset interface {
	// Units is the number of units.
	Units() uint64
	// Bytes is the approximate size of all units' text.
	Bytes() uint64
	// Offset is the approximate position of unit u's first byte, for u in
	// [0, Units()]; monotone, cheap, and Offset(Units()) == Bytes().
	Offset(u uint64) uint64
	// Docs calls visit with each document's UTF-8 text in unit u, in file
	// order. The text is valid only during the call. A skipped bad record is
	// not visited; an error from visit stops Docs and is returned.
	Docs(u uint64, visit func(text []byte) error) error
	// Skipped is the number of distinct bad records skipped so far (each
	// counted once, the first time its unit is read). Always 0 unless
	// Spec.OnBadRecord is "skip".
	Skipped() uint64
	// Groups returns the runs of two or more units in [lo, hi) that are
	// best read in order, one after the other (the units of one compressed
	// JSONL file, which is decompressed from its start to reach a unit),
	// clipped to [lo, hi), in order.
	Groups(lo, hi uint64) [][2]uint64
	// Compressed describes the dataset's compressed JSONL files.
	Compressed() CompressedStats
	// Files lists the dataset's files and their sizes.
	Files() []source.File
	// Close releases the files.
	Close() error
}

// CompressedStats describes the compressed JSONL files of a dataset.
type CompressedStats struct {
	// Files is the number of compressed files; Whole, those among them
	// whose header gives no plausible size hint, each read as one unit
	// (tokenized whole into the cache).
	Files, Whole uint64
	// Starts is the number of decoders started at a file's beginning: once
	// per file (and per shard sharing it) per epoch when units are read in
	// order, more when a read had to go back.
	Starts uint64
	// PeakText is the most decompressed text one read held at once, in
	// bytes: about BlockBytes plus a line.
	PeakText uint64
	// MaxWindow is the largest decoder window a zstd file's header asks
	// for, in bytes: what each decoder of that file holds (2 MiB at zstd's
	// default level, 8 MiB at level 19, 128 MiB with --long=27).
	MaxWindow uint64
	// Ambiguous is the number of gzip files large enough that their
	// trailer (the text size modulo 4 GiB) allows several ordinary sizes:
	// their hint is a guess, and their units may be uneven.
	Ambiguous uint64
}

// BadRecordError is a record that is not a document: malformed JSON, a
// missing, null or non-string field, text that is not UTF-8. It wraps
// source.ErrInvalid.
type BadRecordError struct {
	Dataset string
	Path    string
	// Where locates the record: "line 12 (byte 3456)", "byte 3456" or "row
	// group 2, row 17".
	Where  string
	Field  string
	Reason string
}

func (e *BadRecordError) Error() string {
	return fmt.Sprintf("%v: dataset %q: file %q: %s: field %q: %s", source.ErrInvalid, e.Dataset, e.Path, e.Where, e.Field, e.Reason)
}

// Unwrap makes errors.Is(err, source.ErrInvalid) hold.
func (e *BadRecordError) Unwrap() error { return source.ErrInvalid }

// part is the units of one file, numbered from 0.
type part interface {
	units() uint64
	bytes() uint64
	offset(u uint64) uint64 // clipped to [0, bytes()]
	// docs visits unit u's documents; bad is called with each bad record
	// and returns nil to skip it.
	docs(u uint64, visit func([]byte) error, bad func(*BadRecordError) error) error
	file() source.File
	close() error
}

// concatDocs is a Dataset over the parts (files) of one dataset: their
// units concatenated in path order, under the bad-record policy.
type concatDocs struct {
	name   string
	parts  []part
	units  files.Concat // of the parts, sized in bytes
	skip   bool
	onSkip func(error)
	pool   *decoderPool // nil unless JSONL

	skipped     atomic.Uint64
	skippedSeen sync.Map // unit -> struct{}: units whose skips are counted

	closeOnce sync.Once
	closeErr  error
}

func newConcatDocs(spec Spec, parts []part) *concatDocs {
	return &concatDocs{
		name:   spec.Name,
		parts:  parts,
		units:  files.NewConcat(len(parts), func(i int) (uint64, uint64) { return parts[i].units(), parts[i].bytes() }),
		skip:   spec.OnBadRecord == OnBadRecordSkip,
		onSkip: spec.OnSkip,
	}
}

func (d *concatDocs) Units() uint64 { return d.units.Units() }
func (d *concatDocs) Bytes() uint64 { return d.units.Size() }

func (d *concatDocs) locate(u uint64) (int, uint64) { return d.units.Locate(u) }

func (d *concatDocs) Offset(u uint64) uint64 {
	if u >= d.Units() {
		return d.Bytes()
	}
	i, local := d.locate(u)
	return d.units.Base(i) + min(d.parts[i].offset(local), d.parts[i].bytes())
}

// Docs visits unit u's documents. Under "skip", the unit's bad records are
// counted (and passed to OnSkip) only the first time the unit is read in
// full, so the count is of records, not of reads.
func (d *concatDocs) Docs(u uint64, visit func([]byte) error) error {
	if u >= d.Units() {
		return fmt.Errorf("text: dataset %q: unit %d out of range [0, %d)", d.name, u, d.Units())
	}
	i, local := d.locate(u)
	var bad []*BadRecordError
	err := d.parts[i].docs(local, visit, func(e *BadRecordError) error {
		if !d.skip {
			return e
		}
		bad = append(bad, e)
		return nil
	})
	if err != nil || len(bad) == 0 {
		return err
	}
	if _, seen := d.skippedSeen.LoadOrStore(u, struct{}{}); !seen {
		d.skipped.Add(uint64(len(bad)))
		if d.onSkip != nil {
			for _, e := range bad {
				d.onSkip(e)
			}
		}
	}
	return nil
}

func (d *concatDocs) Skipped() uint64 { return d.skipped.Load() }

func (d *concatDocs) Groups(lo, hi uint64) [][2]uint64 {
	hi = min(hi, d.Units())
	if lo >= hi {
		return nil
	}
	var runs [][2]uint64
	i, _ := d.locate(lo)
	for ; i < len(d.parts) && d.units.Start(i) < hi; i++ {
		if _, ok := d.parts[i].(*zjsonlFile); !ok {
			continue
		}
		if a, b := max(d.units.Start(i), lo), min(d.units.Start(i+1), hi); b-a >= 2 {
			runs = append(runs, [2]uint64{a, b})
		}
	}
	return runs
}

func (d *concatDocs) Compressed() CompressedStats {
	var st CompressedStats
	for _, p := range d.parts {
		if z, ok := p.(*zjsonlFile); ok {
			st.Files++
			if z.hint == 0 {
				st.Whole++
			}
			st.MaxWindow = max(st.MaxWindow, z.window)
			if z.ambiguous {
				st.Ambiguous++
			}
		}
	}
	if d.pool != nil {
		st.Starts, st.PeakText = d.pool.starts.Load(), d.pool.peak.Load()
	}
	return st
}

func (d *concatDocs) Files() []source.File {
	files := make([]source.File, len(d.parts))
	for i, p := range d.parts {
		files[i] = p.file()
	}
	return files
}

func (d *concatDocs) Close() error {
	d.closeOnce.Do(func() { d.closeErr = closeParts(d.parts) })
	return d.closeErr
}

func closeParts(parts []part) error {
	var errs []error
	for _, p := range parts {
		errs = append(errs, p.close())
	}
	return errors.Join(errs...)
}

// invalidFile is the error for bad content in one file of a dataset.
func invalidFile(dataset, path, format string, args ...any) error {
	return fmt.Errorf("%w: dataset %q: file %q: %s", source.ErrInvalid, dataset, path, fmt.Sprintf(format, args...))
}

// readFailed is invalidFile for a failure while reading the file, whose
// cause err may be object storage (after its retries: not bad input, and
// not to be called corrupt) rather than the file's content.
func readFailed(dataset, path string, err error, format string, args ...any) error {
	if errors.Is(err, objstore.ErrObject) {
		return source.DatasetError(dataset, err)
	}
	return invalidFile(dataset, path, format, args...)
}
