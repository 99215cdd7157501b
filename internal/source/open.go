package source

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Formats Open accepts in Spec.Format.
const (
	FormatMegatron = "megatron"
	FormatTokens   = "tokens"
	FormatArrow    = "arrow"
)

// DefaultBlockTokens is the nominal unit size of flat token files when
// Spec.BlockTokens is 0.
const DefaultBlockTokens = 16384

// Open resolves spec.Path and maps the dataset's files as one Source, their
// units concatenated in sorted path order. It reads headers and the first and
// last index entries of each file only, so it costs O(files). Every error
// wraps ErrInvalid and names the dataset and the path or value at fault.
func Open(spec Spec) (Source, error) {
	var (
		parts     []fileUnits
		err       error
		delimited bool
	)
	switch spec.Format {
	case FormatMegatron:
		parts, err = openMegatronParts(spec)
	case FormatTokens:
		parts, err = openTokenParts(spec)
		delimited = true
	case FormatArrow:
		parts, err = openArrowParts(spec)
	default:
		return nil, fmt.Errorf("%w: dataset %q: format %q: want %q, %q or %q",
			ErrInvalid, spec.Name, spec.Format, FormatMegatron, FormatTokens, FormatArrow)
	}
	if err != nil {
		return nil, err
	}
	ds, err := newDataset(spec.Name, parts, delimited)
	if err != nil {
		closeParts(parts)
		return nil, err
	}
	return ds, nil
}

// openMegatronParts opens every PREFIX.idx/PREFIX.bin pair spec.Path names.
func openMegatronParts(spec Spec) ([]fileUnits, error) {
	prefixes, err := megatronPrefixes(spec)
	if err != nil {
		return nil, err
	}
	parts := make([]fileUnits, 0, len(prefixes))
	for _, prefix := range prefixes {
		part, err := openMegatronFile(spec.Name, prefix)
		if err != nil {
			closeParts(parts)
			return nil, err
		}
		parts = append(parts, part)
	}
	return parts, nil
}

// openTokenParts opens every flat token file spec.Path names.
func openTokenParts(spec Spec) ([]fileUnits, error) {
	layout, err := parseTokenLayout(spec)
	if err != nil {
		return nil, err
	}
	paths, err := tokenPaths(spec)
	if err != nil {
		return nil, err
	}
	parts := make([]fileUnits, 0, len(paths))
	for _, path := range paths {
		part, err := openTokenFile(spec.Name, path, layout)
		if err != nil {
			closeParts(parts)
			return nil, err
		}
		parts = append(parts, part)
	}
	return parts, nil
}

// openArrowParts opens every Arrow IPC file spec.Path names.
func openArrowParts(spec Spec) ([]fileUnits, error) {
	paths, err := arrowPaths(spec)
	if err != nil {
		return nil, err
	}
	column := arrowColumn(spec)
	parts := make([]fileUnits, 0, len(paths))
	for _, path := range paths {
		part, err := openArrowFile(spec.Name, path, column)
		if err != nil {
			closeParts(parts)
			return nil, err
		}
		parts = append(parts, part)
	}
	return parts, nil
}

// megatronPrefixes resolves spec.Path to sorted, distinct Megatron prefixes:
// a glob's matches ending in .idx or .bin, a directory's X.idx files, or one
// prefix (given bare or as PREFIX.bin or PREFIX.idx).
func megatronPrefixes(spec Spec) ([]string, error) {
	var candidates []string
	switch info, statErr := os.Stat(spec.Path); {
	case hasGlobMeta(spec.Path):
		matches, err := globFiles(spec)
		if err != nil {
			return nil, err
		}
		candidates = matches
	case statErr == nil && info.IsDir():
		names, err := dirFiles(spec, ".idx")
		if err != nil {
			return nil, err
		}
		candidates = names
	default:
		if prefix, _ := trimMegatronExt(spec.Path); fileExists(prefix+".idx") || fileExists(prefix+".bin") {
			return []string{prefix}, nil
		}
	}
	seen := make(map[string]bool)
	var prefixes []string
	for _, c := range candidates {
		if prefix, ok := trimMegatronExt(c); ok && !seen[prefix] {
			seen[prefix] = true
			prefixes = append(prefixes, prefix)
		}
	}
	if len(prefixes) == 0 {
		return nil, noFilesError(spec, "megatron (PREFIX.idx and PREFIX.bin)")
	}
	sort.Strings(prefixes)
	return prefixes, nil
}

// tokenPaths resolves spec.Path to sorted flat token files: a glob's regular
// files, a directory's *.bin files, or the file itself.
func tokenPaths(spec Spec) ([]string, error) {
	return filePaths(spec, ".bin", "tokens (.bin)")
}

// filePaths resolves spec.Path to sorted files: a glob's regular files, a
// directory's files whose names end in ext, or the file itself; what names
// the kind of file in the error when there are none.
func filePaths(spec Spec, ext, what string) ([]string, error) {
	var paths []string
	switch info, statErr := os.Stat(spec.Path); {
	case hasGlobMeta(spec.Path):
		matches, err := globFiles(spec)
		if err != nil {
			return nil, err
		}
		paths = matches
	case statErr == nil && info.IsDir():
		names, err := dirFiles(spec, ext)
		if err != nil {
			return nil, err
		}
		paths = names
	case statErr == nil:
		paths = []string{spec.Path}
	}
	if len(paths) == 0 {
		return nil, noFilesError(spec, what)
	}
	sort.Strings(paths)
	return paths, nil
}

// globFiles returns the matches of spec.Path that are not directories.
func globFiles(spec Spec) ([]string, error) {
	matches, err := filepath.Glob(spec.Path)
	if err != nil {
		return nil, fmt.Errorf("%w: dataset %q: path %q: %w", ErrInvalid, spec.Name, spec.Path, err)
	}
	files := matches[:0]
	for _, m := range matches {
		if info, err := os.Stat(m); err == nil && !info.IsDir() {
			files = append(files, m)
		}
	}
	return files, nil
}

// dirFiles returns the paths of the non-directory entries of directory
// spec.Path whose names end in ext.
func dirFiles(spec Spec, ext string) ([]string, error) {
	entries, err := os.ReadDir(spec.Path)
	if err != nil {
		return nil, fmt.Errorf("%w: dataset %q: path %q: %w", ErrInvalid, spec.Name, spec.Path, err)
	}
	var paths []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ext) {
			paths = append(paths, filepath.Join(spec.Path, e.Name()))
		}
	}
	return paths, nil
}

func noFilesError(spec Spec, what string) error {
	return fmt.Errorf("%w: dataset %q: path %q: no %s files found", ErrInvalid, spec.Name, spec.Path, what)
}

// hasGlobMeta reports whether path holds characters filepath.Glob expands.
func hasGlobMeta(path string) bool { return strings.ContainsAny(path, "*?[") }

// trimMegatronExt strips a .idx or .bin extension, reporting whether there was one.
func trimMegatronExt(path string) (string, bool) {
	for _, ext := range []string{".idx", ".bin"} {
		if prefix, ok := strings.CutSuffix(path, ext); ok {
			return prefix, true
		}
	}
	return path, false
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
