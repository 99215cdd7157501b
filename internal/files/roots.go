package files

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/dataloaderd/dataloaderd/internal/errkind"
	"github.com/dataloaderd/dataloaderd/internal/objstore"
)

// ErrOutsideRoots marks a path that lies outside every allowed root.
var ErrOutsideRoots = errkind.New(errkind.PermissionDenied, "path outside every allowed root")

// OutsideError is a path refused because it lies outside every allowed
// root, after its symlinks are resolved. It wraps ErrOutsideRoots.
type OutsideError struct {
	// What names the path in the job: `dataset "web" path`, "save folder".
	What string
	// Path is the path as it was named; Resolved, where it leads.
	Path, Resolved string
	// Roots are the allowed roots.
	Roots []string
}

// Error says what was refused, where it leads if a symlink took it out, and
// which roots are allowed.
func (e *OutsideError) Error() string {
	via := ""
	if e.Resolved != "" {
		via = fmt.Sprintf(", which resolves to %q,", e.Resolved)
	}
	return fmt.Sprintf("%v: %s %q%s is not under any --allow-root (%s)",
		ErrOutsideRoots, e.What, e.Path, via, strings.Join(e.Roots, ", "))
}

// Unwrap makes errors.Is(err, ErrOutsideRoots) hold.
func (e *OutsideError) Unwrap() error { return ErrOutsideRoots }

// Roots confines the files a job may name (datasets, tokenizer files,
// resume and save folders) to a set of directories, and is the way every
// such file is opened. With roots, a path is resolved (symlinks followed),
// the root holding it is found, and the file is opened relative to that
// root through an os.Root, so what is opened is what was checked: a symlink
// swapped in after the check cannot lead out of the root. A nil Roots, or
// one of no directories, confines nothing and opens paths as they are.
type Roots struct {
	dirs []string // absolute, symlinks resolved when they existed
	// buckets are the allowed object-storage prefixes (s3://bucket/prefix).
	buckets []objstore.Location
	// objects reads s3:// paths; nil: object storage is off.
	objects *objstore.Store
}

// NewRoots makes the roots of dirs; none means no confinement. An s3://
// entry allows the objects under that bucket prefix.
func NewRoots(dirs []string) (*Roots, error) {
	r := &Roots{}
	for _, d := range dirs {
		if objstore.IsURL(d) {
			loc, err := objstore.Parse(d)
			if err != nil {
				return nil, fmt.Errorf("allow-root: %w", err)
			}
			r.buckets = append(r.buckets, loc)
			continue
		}
		abs, err := filepath.Abs(d)
		if err != nil {
			return nil, fmt.Errorf("allow-root %q: %w", d, err)
		}
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			abs = real
		}
		r.dirs = append(r.dirs, abs)
	}
	return r, nil
}

func (r *Roots) confined() bool { return r != nil && len(r.dirs)+len(r.buckets) > 0 }

// WithObjects makes s3:// paths readable through store (the node's cache).
func (r *Roots) WithObjects(store *objstore.Store) *Roots {
	r.objects = store
	return r
}

// all lists the roots, directories and bucket prefixes, for errors.
func (r *Roots) all() []string {
	out := append([]string(nil), r.dirs...)
	for _, b := range r.buckets {
		out = append(out, b.String())
	}
	return out
}

// object parses an s3:// path and refuses it outside every allowed bucket
// prefix (for a glob, the prefix before its first metacharacter is
// checked, and every match again).
func (r *Roots) object(what, path string) (objstore.Location, error) {
	loc, err := objstore.Parse(path)
	if err != nil {
		return loc, err
	}
	if !r.confined() {
		return loc, nil
	}
	check := loc
	if i := strings.IndexAny(loc.Key, globMeta); i >= 0 {
		check.Key = loc.Key[:strings.LastIndex(loc.Key[:i], "/")+1]
	}
	for _, b := range r.buckets {
		if check.Within(b) {
			return loc, nil
		}
	}
	return loc, &OutsideError{What: what, Path: path, Roots: r.all()}
}

// store is the object store, or why s3:// paths cannot be read.
func (r *Roots) store() (*objstore.Store, error) {
	if r == nil || r.objects == nil {
		return nil, fmt.Errorf("%w: object storage is not enabled on this daemon", objstore.ErrObject)
	}
	return r.objects, nil
}

// Check refuses a path outside every root, with an *OutsideError whose
// What is what. Symlinks in the existing part of the path are resolved
// first; for a glob, the directory before its first metacharacter is
// checked. Check opens nothing: it gives an early, clear error, and every
// open checks again.
func (r *Roots) Check(what, path string) error {
	if objstore.IsURL(path) {
		_, err := r.object(what, path)
		return err
	}
	if !r.confined() {
		return nil
	}
	if i := strings.IndexAny(path, globMeta); i >= 0 {
		path = filepath.Dir(path[:i] + "x")
	}
	_, _, err := r.find(what, path)
	return err
}

// find returns the root holding path (symlinks resolved as far as it
// exists) and the resolved path relative to it.
func (r *Roots) find(what, path string) (root, rel string, err error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", "", &OutsideError{What: what, Path: path, Roots: r.all()}
	}
	real := resolveExisting(abs)
	for _, root := range r.dirs {
		rel, err := filepath.Rel(root, real)
		if err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return root, rel, nil
		}
	}
	e := &OutsideError{What: what, Path: path, Roots: r.all()}
	if real != abs {
		e.Resolved = real
	}
	return "", "", e
}

// resolveExisting resolves symlinks in the longest existing prefix of p.
func resolveExisting(p string) string {
	rest := ""
	for cur := p; ; {
		if real, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(real, rest)
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

// place is where one operation happens: a path of the host's file system
// (no confinement), or a path relative to an opened root.
type place struct {
	root *os.Root // nil: no confinement
	name string
	// what and path are the path as the job named it, and roots all the
	// roots, for errors.
	what, path string
	roots      []string
}

// locate finds where path is, opening the root that holds it; the caller
// closes the place.
func (r *Roots) locate(what, path string) (place, error) {
	if !r.confined() {
		return place{name: path, what: what, path: path}, nil
	}
	dir, rel, err := r.find(what, path)
	if err != nil {
		return place{}, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return place{}, err
	}
	return place{root: root, name: rel, what: what, path: path, roots: r.all()}, nil
}

func (p place) close() {
	if p.root != nil {
		p.root.Close()
	}
}

// fail restates an error of an operation on p as the same operation on the
// path the job named would have reported it: op and the job's path, not the
// root's relative name. A link the root refused to follow out of it is an
// *OutsideError.
func (p place) fail(op string, err error) error {
	if err == nil || p.root == nil {
		return err
	}
	var pe *fs.PathError
	if !errors.As(err, &pe) {
		return err
	}
	if escapes(pe.Err) {
		return &OutsideError{What: p.what, Path: p.path, Roots: p.roots}
	}
	return &fs.PathError{Op: op, Path: p.path, Err: pe.Err}
}

// escapes reports whether an os.Root refused a path because it leads out
// of the root (through "..", or a symlink that is absolute or climbs out).
// The os package does not export that error, so it is known by its text;
// TestEscapeIsRecognised fails if the text changes.
func escapes(err error) bool { return err != nil && err.Error() == "path escapes from parent" }

func (p place) open() (*os.File, error) {
	return p.openFlags(os.O_RDONLY)
}

func (p place) openFlags(flag int) (*os.File, error) {
	if p.root == nil {
		return os.OpenFile(p.name, flag, 0)
	}
	f, err := p.root.OpenFile(p.name, flag, 0)
	return f, p.fail("open", err)
}

func (p place) stat() (fs.FileInfo, error) {
	if p.root == nil {
		return os.Stat(p.name)
	}
	info, err := p.root.Stat(p.name)
	return info, p.fail("stat", err)
}

func (p place) mkdirAll(perm fs.FileMode) error {
	if p.root == nil {
		return os.MkdirAll(p.name, perm)
	}
	return p.fail("mkdir", p.root.MkdirAll(p.name, perm))
}

func (p place) create(perm fs.FileMode) (*os.File, error) {
	flag := os.O_RDWR | os.O_CREATE | os.O_EXCL
	if p.root == nil {
		return os.OpenFile(p.name, flag, perm)
	}
	f, err := p.root.OpenFile(p.name, flag, perm)
	return f, p.fail("open", err)
}

func (p place) remove() error {
	if p.root == nil {
		return os.Remove(p.name)
	}
	return p.fail("remove", p.root.Remove(p.name))
}

// rename moves p to to, a place in the same directory.
func (p place) rename(to place) error {
	if p.root == nil {
		return os.Rename(p.name, to.name)
	}
	return p.fail("rename", p.root.Rename(p.name, to.name))
}
