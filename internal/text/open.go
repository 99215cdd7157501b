package text

import (
	"fmt"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/source"
)

// Open resolves spec.Path and opens the files as one Dataset, their units
// concatenated in sorted path order. It reads file sizes, the first bytes of
// JSONL files (to detect compression) and Parquet footers only, so it costs
// O(files). Every file is opened through spec.Roots. Every error wraps
// source.ErrInvalid and names the dataset and the path or value at fault,
// except that of a path outside the roots, which wraps files.ErrOutsideRoots.
func Open(spec Spec) (Dataset, error) {
	format, _ := files.Lookup(spec.Format)
	return OpenFormat(format, spec)
}

// OpenFormat is Open for a format already looked up in the registry (a
// corpus looks each dataset's up once, when its config is checked); the
// zero Format, or a token format, is refused as Open refuses its name.
func OpenFormat(format files.Format, spec Spec) (Dataset, error) {
	switch spec.OnBadRecord {
	case "", OnBadRecordError, OnBadRecordSkip:
	default:
		return nil, fmt.Errorf("%w: dataset %q: on_bad_record %q: want %q or %q",
			source.ErrInvalid, spec.Name, spec.OnBadRecord, OnBadRecordError, OnBadRecordSkip)
	}
	if !format.Text {
		return nil, fmt.Errorf("%w: dataset %q: format %q: want %s",
			source.ErrInvalid, spec.Name, spec.Format, files.List(files.Quote(files.Names(files.IsText)), "or"))
	}
	field := spec.Field
	if field == "" {
		field = format.Field
	}
	fs := files.Dataset{Roots: spec.Roots, Name: spec.Name, Context: spec.Context}
	var (
		open func(path string) (part, error)
		pool *decoderPool
	)
	switch format.Name {
	case files.Parquet:
		open = func(path string) (part, error) { return openParquetFile(fs, path, field) }
	case files.JSONL:
		blocks := spec.BlockBytes
		if blocks == 0 {
			blocks = DefaultBlockBytes
		}
		pool = newDecoderPool(spec.Decoders)
		open = func(path string) (part, error) { return openJSONLFile(fs, path, field, blocks, pool) }
	}
	paths, err := fs.Resolve(format, spec.Path)
	if err != nil {
		return nil, source.DatasetError(spec.Name, err)
	}
	parts := make([]part, 0, len(paths))
	for _, path := range paths {
		p, err := open(path)
		if err != nil {
			closeParts(parts)
			return nil, err
		}
		parts = append(parts, p)
	}
	d := newConcatDocs(spec, parts)
	d.pool = pool
	return d, nil
}
