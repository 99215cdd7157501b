package text

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/dataloaderd/dataloaderd/internal/source"
)

// Open resolves spec.Path and opens the files as one Dataset, their units
// concatenated in sorted path order. It reads file sizes, the first bytes of
// JSONL files (to detect compression) and Parquet footers only, so it costs
// O(files). Every error wraps source.ErrInvalid and names the dataset and the
// path or value at fault.
func Open(spec Spec) (Dataset, error) {
	field := spec.Field
	if field == "" {
		field = DefaultField
	}
	switch spec.OnBadRecord {
	case "", OnBadRecordError, OnBadRecordSkip:
	default:
		return nil, fmt.Errorf("%w: dataset %q: on_bad_record %q: want %q or %q",
			source.ErrInvalid, spec.Name, spec.OnBadRecord, OnBadRecordError, OnBadRecordSkip)
	}
	var (
		exts []string
		what string
		open func(path string) (part, error)
		pool *decoderPool
	)
	switch spec.Format {
	case FormatParquet:
		exts, what = []string{".parquet"}, "parquet (.parquet)"
		open = func(path string) (part, error) { return openParquetFile(spec.Name, path, field) }
	case FormatJSONL:
		for _, base := range []string{".jsonl", ".ndjson"} {
			exts = append(exts, base, base+".gz", base+".zst")
		}
		what = "jsonl (.jsonl, .ndjson, optionally .gz or .zst)"
		blocks := spec.BlockBytes
		if blocks == 0 {
			blocks = DefaultBlockBytes
		}
		pool = newDecoderPool(spec.Decoders)
		open = func(path string) (part, error) { return openJSONLFile(spec.Name, path, field, blocks, pool) }
	default:
		return nil, fmt.Errorf("%w: dataset %q: format %q: want %q or %q",
			source.ErrInvalid, spec.Name, spec.Format, FormatParquet, FormatJSONL)
	}
	paths, err := resolve(spec, exts, what)
	if err != nil {
		return nil, err
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
	d := newDataset(spec, parts)
	d.pool = pool
	return d, nil
}

// resolve turns spec.Path into sorted files: a glob's regular files, a
// directory's files ending in one of exts, or the file itself.
func resolve(spec Spec, exts []string, what string) ([]string, error) {
	var paths []string
	switch info, statErr := os.Stat(spec.Path); {
	case strings.ContainsAny(spec.Path, "*?["):
		matches, err := filepath.Glob(spec.Path)
		if err != nil {
			return nil, fmt.Errorf("%w: dataset %q: path %q: %w", source.ErrInvalid, spec.Name, spec.Path, err)
		}
		for _, m := range matches {
			if info, err := os.Stat(m); err == nil && !info.IsDir() {
				paths = append(paths, m)
			}
		}
	case statErr == nil && info.IsDir():
		entries, err := os.ReadDir(spec.Path)
		if err != nil {
			return nil, fmt.Errorf("%w: dataset %q: path %q: %w", source.ErrInvalid, spec.Name, spec.Path, err)
		}
		for _, e := range entries {
			if e.IsDir() {
				continue
			}
			for _, ext := range exts {
				if strings.HasSuffix(e.Name(), ext) {
					paths = append(paths, filepath.Join(spec.Path, e.Name()))
					break
				}
			}
		}
	case statErr == nil:
		paths = []string{spec.Path}
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%w: dataset %q: path %q: no %s files found", source.ErrInvalid, spec.Name, spec.Path, what)
	}
	sort.Strings(paths)
	return paths, nil
}
