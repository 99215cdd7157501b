package files

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	pathpkg "path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
)

// globMeta are the characters that make a path a glob.
const globMeta = "*?["

// Dataset is the file access of one dataset: it resolves the dataset's path
// into files and opens them through Roots. Outside paths are named
// `dataset "NAME" path` (the path of the config) or `dataset "NAME" file`
// (one of its files). Its other errors do not name the dataset: the reader
// adds that, with its own error kind.
type Dataset struct {
	Roots *Roots
	Name  string
	// Context bounds the requests made to object storage for the dataset:
	// its listings and HEADs, the opening of its objects and every read of
	// their bytes through the Blobs that Load gives (which keep it). When
	// it ends they fail with its error. Nil is context.Background().
	Context context.Context
}

// ctx is d.Context, or context.Background() where it is nil.
func (d Dataset) ctx() context.Context {
	if d.Context == nil {
		return context.Background()
	}
	return d.Context
}

func (d Dataset) pathWhat() string { return fmt.Sprintf("dataset %q path", d.Name) }
func (d Dataset) fileWhat() string { return fmt.Sprintf("dataset %q file", d.Name) }

// Open opens one of the dataset's files for reading.
func (d Dataset) Open(path string) (*os.File, error) { return d.Roots.Open(d.fileWhat(), path) }

// Stat describes one of the dataset's files, following symlinks, or one
// of its objects (a HEAD request).
func (d Dataset) Stat(path string) (fs.FileInfo, error) {
	if !objstore.IsURL(path) {
		return d.Roots.Stat(d.fileWhat(), path)
	}
	loc, store, err := d.object(path)
	if err != nil {
		return nil, err
	}
	info, err := store.Head(d.ctx(), loc)
	if err != nil {
		return nil, err
	}
	return objectInfo{name: pathpkg.Base(loc.Key), size: info.Size}, nil
}

// Map memory-maps one of the dataset's files (see Roots.Map).
func (d Dataset) Map(path string) ([]byte, error) { return d.Roots.Map(d.fileWhat(), path) }

// Resolve turns the dataset's path into its files, sorted: a glob's matches
// that are not directories; a directory's entries that are not directories
// and end in one of the format's Exts; or the file itself. For a Paired
// format it returns prefixes instead: those of a glob's matches ending in
// .idx or .bin, of a directory's .idx files, or the path itself with any
// .idx or .bin taken off when PREFIX.idx or PREFIX.bin exists. It fails
// when there are none ("path ...: no ... files found").
func (d Dataset) Resolve(f Format, path string) ([]string, error) {
	if objstore.IsURL(path) {
		return d.resolveObjects(f, path)
	}
	if err := d.Roots.Check(d.pathWhat(), path); err != nil {
		return nil, err
	}
	var paths []string
	info, statErr := d.Roots.Stat(d.pathWhat(), path)
	if isOutside(statErr) {
		return nil, statErr
	}
	switch {
	case strings.ContainsAny(path, globMeta):
		matches, err := d.glob(path)
		if err != nil {
			return nil, err
		}
		paths = matches
	case statErr == nil && info.IsDir():
		names, err := d.dirFiles(path, f.Exts)
		if err != nil {
			return nil, err
		}
		paths = names
	case f.Paired:
		prefix, _ := trimPairExt(path)
		ok, err := d.anyExists(prefix+".idx", prefix+".bin")
		if err != nil {
			return nil, err
		}
		if ok {
			return []string{prefix}, nil
		}
	case statErr == nil:
		paths = []string{path}
	}
	if f.Paired {
		paths = prefixes(paths)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("path %q: no %s files found", path, f.Files)
	}
	sort.Strings(paths)
	return paths, nil
}

// glob returns the matches of pattern that are not directories.
func (d Dataset) glob(pattern string) ([]string, error) {
	matches, err := filepath.Glob(pattern)
	if err != nil {
		return nil, fmt.Errorf("path %q: %w", pattern, err)
	}
	files := matches[:0]
	for _, m := range matches {
		info, err := d.Stat(m)
		if isOutside(err) {
			return nil, err
		}
		if err == nil && !info.IsDir() {
			files = append(files, m)
		}
	}
	return files, nil
}

// dirFiles returns the paths of dir's entries that are not directories and
// end in one of exts.
func (d Dataset) dirFiles(dir string, exts []string) ([]string, error) {
	entries, err := d.Roots.ReadDir(d.pathWhat(), dir)
	if err != nil {
		if isOutside(err) {
			return nil, err
		}
		return nil, fmt.Errorf("path %q: %w", dir, err)
	}
	var paths []string
	for _, e := range entries {
		if !e.IsDir() && hasExt(e.Name(), exts) {
			paths = append(paths, filepath.Join(dir, e.Name()))
		}
	}
	return paths, nil
}

// anyExists reports whether any of paths can be described; a path outside
// the roots is an error.
func (d Dataset) anyExists(paths ...string) (bool, error) {
	for _, p := range paths {
		_, err := d.Stat(p)
		if isOutside(err) {
			return false, err
		}
		if err == nil {
			return true, nil
		}
	}
	return false, nil
}

// prefixes returns the distinct prefixes of paths ending in .idx or .bin.
func prefixes(paths []string) []string {
	seen := make(map[string]bool)
	var out []string
	for _, p := range paths {
		if prefix, ok := trimPairExt(p); ok && !seen[prefix] {
			seen[prefix] = true
			out = append(out, prefix)
		}
	}
	return out
}

// trimPairExt strips a .idx or .bin extension, reporting whether there was one.
func trimPairExt(path string) (string, bool) {
	for _, ext := range []string{".idx", ".bin"} {
		if prefix, ok := strings.CutSuffix(path, ext); ok {
			return prefix, true
		}
	}
	return path, false
}

func isOutside(err error) bool {
	var oe *OutsideError
	return errors.As(err, &oe)
}

// object is one of the dataset's objects, checked against the roots, and
// the store that reads it.
func (d Dataset) object(path string) (objstore.Location, *objstore.Store, error) {
	loc, err := d.Roots.object(d.fileWhat(), path)
	if err != nil {
		return loc, nil, err
	}
	store, err := d.Roots.store()
	return loc, store, err
}

// globObjects lists the keys of the objects that loc, a glob whose first
// meta character is at i, matches ("*" does not cross "/"); path is the
// glob as the config gave it, for errors.
func globObjects(ctx context.Context, store *objstore.Store, loc objstore.Location, i int, path string) ([]string, error) {
	dir := loc.Key[:strings.LastIndex(loc.Key[:i], "/")+1]
	infos, err := store.List(ctx, loc.Bucket, dir, true)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, o := range infos {
		ok, err := pathpkg.Match(loc.Key, o.Key)
		if err != nil {
			return nil, fmt.Errorf("path %q: %w", path, err)
		}
		if ok && !strings.HasSuffix(o.Key, "/") {
			keys = append(keys, o.Key)
		}
	}
	return keys, nil
}

// resolveObjects is Resolve for an s3:// path: a glob over keys ("*" does
// not cross "/"), an object, a Megatron prefix (PREFIX.idx or PREFIX.bin
// exists), or a prefix listed one level deep as a directory would be. It
// costs a HEAD or two and one listing.
func (d Dataset) resolveObjects(f Format, path string) ([]string, error) {
	loc, err := d.Roots.object(d.pathWhat(), path)
	if err != nil {
		return nil, err
	}
	store, err := d.Roots.store()
	if err != nil {
		return nil, err
	}
	ctx := d.ctx()
	var paths []string
	add := func(key string) error {
		p := objstore.Location{Bucket: loc.Bucket, Key: key}.String()
		if _, err := d.Roots.object(d.fileWhat(), p); err != nil {
			return err
		}
		paths = append(paths, p)
		return nil
	}
	// exists is false for a missing object; the store failing is an error.
	var headErr error
	exists := func(key string) bool {
		_, err := store.Head(ctx, objstore.Location{Bucket: loc.Bucket, Key: key})
		if err != nil && !errors.Is(err, objstore.ErrNotFound) && headErr == nil {
			headErr = err
		}
		return err == nil
	}
	switch i := strings.IndexAny(loc.Key, globMeta); {
	case i >= 0:
		keys, err := globObjects(ctx, store, loc, i, path)
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			if err := add(k); err != nil {
				return nil, err
			}
		}
	case f.Paired && loc.Key != "" && !strings.HasSuffix(loc.Key, "/"):
		prefix, _ := trimPairExt(loc.Key)
		if exists(prefix+".idx") || exists(prefix+".bin") {
			return []string{objstore.Location{Bucket: loc.Bucket, Key: prefix}.String()}, nil
		}
	case loc.Key != "" && !strings.HasSuffix(loc.Key, "/") && exists(loc.Key):
		paths = []string{path}
	}
	if headErr != nil {
		return nil, headErr
	}
	if paths == nil && !strings.ContainsAny(loc.Key, globMeta) {
		dir := loc.Key
		if dir != "" && !strings.HasSuffix(dir, "/") {
			dir += "/"
		}
		infos, err := store.List(ctx, loc.Bucket, dir, false)
		if err != nil {
			return nil, err
		}
		for _, o := range infos {
			if hasExt(o.Key, f.Exts) {
				if err := add(o.Key); err != nil {
					return nil, err
				}
			}
		}
	}
	if f.Paired {
		paths = prefixes(paths)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("path %q: no %s objects found", path, f.Files)
	}
	sort.Strings(paths)
	return paths, nil
}

// IsObject reports whether a dataset path names objects in object storage
// (s3://) rather than local files.
func IsObject(path string) bool { return objstore.IsURL(path) }
