package files

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ErrOutsideRoots marks a path that lies outside every allowed root.
var ErrOutsideRoots = errors.New("path outside every allowed root")

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
}

// NewRoots makes the roots of dirs; none means no confinement.
func NewRoots(dirs []string) (*Roots, error) {
	r := &Roots{}
	for _, d := range dirs {
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

func (r *Roots) confined() bool { return r != nil && len(r.dirs) > 0 }

// Check refuses a path outside every root, with an *OutsideError whose
// What is what. Symlinks in the existing part of the path are resolved
// first; for a glob, the directory before its first metacharacter is
// checked. Check opens nothing: it gives an early, clear error, and every
// open checks again.
func (r *Roots) Check(what, path string) error {
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
		return "", "", &OutsideError{What: what, Path: path, Roots: r.dirs}
	}
	real := resolveExisting(abs)
	for _, root := range r.dirs {
		rel, err := filepath.Rel(root, real)
		if err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return root, rel, nil
		}
	}
	e := &OutsideError{What: what, Path: path, Roots: r.dirs}
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
	return place{root: root, name: rel, what: what, path: path, roots: r.dirs}, nil
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
