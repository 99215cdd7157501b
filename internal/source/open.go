package source

import (
	"context"
	"errors"
	"fmt"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/objstore"
)

// DefaultBlockTokens is the nominal unit size of flat token files when
// Spec.BlockTokens is 0.
const DefaultBlockTokens = 16384

// Open resolves spec.Path and maps the dataset's files as one Source, their
// units concatenated in sorted path order. It reads headers and the first and
// last index entries of each file only, so it costs O(files). Every file is
// opened through spec.Roots. Every error wraps ErrInvalid and names the
// dataset and the path or value at fault, except that of a path outside the
// roots, which wraps files.ErrOutsideRoots.
func Open(spec Spec) (Source, error) {
	format, _ := files.Lookup(spec.Format)
	return OpenFormat(format, spec)
}

// OpenFormat is Open for a format already looked up in the registry (a
// corpus looks each dataset's up once, when its config is checked); the
// zero Format, or a text format, is refused as Open refuses its name.
func OpenFormat(format files.Format, spec Spec) (Source, error) {
	fs := files.Dataset{Roots: spec.Roots, Name: spec.Name, Context: spec.Context}
	var open func(path string) (fileUnits, error)
	// probes are spec.OffsetProbes for a dataset of one file, whose units
	// are the file's; set once the path is resolved.
	var probes CutProbes
	switch format.Name {
	default:
		return nil, fmt.Errorf("%w: dataset %q: format %q: want %s",
			ErrInvalid, spec.Name, spec.Format, files.List(files.Quote(files.Names(files.IsTokens)), "or"))
	case files.Megatron:
		open = func(prefix string) (fileUnits, error) { return openMegatronFile(fs, prefix, probes) }
	case files.Tokens:
		layout, err := parseTokenLayout(spec)
		if err != nil {
			return nil, err
		}
		open = func(path string) (fileUnits, error) { return openTokenFile(fs, path, layout) }
	case files.Arrow:
		column := arrowColumn(spec)
		open = func(path string) (fileUnits, error) { return openArrowFile(fs, path, column) }
	}
	paths, err := fs.Resolve(format, spec.Path)
	if err != nil {
		return nil, DatasetError(spec.Name, err)
	}
	if len(paths) == 1 {
		probes = spec.OffsetProbes
	}
	parts := make([]fileUnits, 0, len(paths))
	for _, path := range paths {
		part, err := open(path)
		if err != nil {
			closeParts(parts)
			return nil, err
		}
		parts = append(parts, part)
	}
	ds, err := newConcatSource(spec.Name, parts, format.Name == files.Tokens)
	if err != nil {
		closeParts(parts)
		return nil, err
	}
	return ds, nil
}

// DatasetError is an error of the file layer (files) as a reader of dataset
// reports it: wrapping ErrInvalid and naming the dataset. A path outside the
// allowed roots is not bad input but a refusal: its error is returned as it
// is, wrapping files.ErrOutsideRoots. DatasetError(dataset, nil) is nil.
func DatasetError(dataset string, err error) error {
	switch {
	case err == nil || errors.Is(err, files.ErrOutsideRoots):
		return err
	case errors.Is(err, objstore.ErrObject) && !errors.Is(err, objstore.ErrNotFound),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// Object storage failed, after its retries, or the open's context
		// ended first: not bad input.
		return holdError(dataset, err)
	}
	return fmt.Errorf("%w: dataset %q: %w", ErrInvalid, dataset, err)
}

// loadFile maps one of a dataset's files, or opens one of its objects,
// through the file layer.
func loadFile(fs files.Dataset, path string) (*files.Blob, error) {
	b, err := fs.Load(path)
	return b, DatasetError(fs.Name, err)
}

// closeBlob closes b, when there is one.
func closeBlob(b *files.Blob) error {
	if b == nil {
		return nil
	}
	return b.Close()
}

// holdError is the error of a read whose object bytes could not be
// fetched: it names the dataset (the object error names the object).
func holdError(dataset string, err error) error {
	return fmt.Errorf("source: dataset %q: %w", dataset, err)
}
