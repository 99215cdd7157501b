package session

import (
	"fmt"
	"path/filepath"
	"strings"
)

// roots confines the paths clients may name (datasets, resume and save
// folders) to a set of directories. No roots means no confinement.
type roots []string

func newRoots(dirs []string) (roots, error) {
	var r roots
	for _, d := range dirs {
		abs, err := filepath.Abs(d)
		if err != nil {
			return nil, fmt.Errorf("allow-root %q: %w", d, err)
		}
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			abs = real
		}
		r = append(r, abs)
	}
	return r, nil
}

// check refuses a path that is not inside any root. Symlinks in the existing
// part of the path are resolved first, so a link cannot lead out of a root;
// for globs the part before the first metacharacter is checked.
func (r roots) check(what, p string) error {
	if len(r) == 0 {
		return nil
	}
	if i := strings.IndexAny(p, "*?["); i >= 0 {
		p = filepath.Dir(p[:i] + "x")
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return fmt.Errorf("%w: %s %q: %v", ErrOutsideRoots, what, p, err)
	}
	abs = resolveExisting(abs)
	for _, root := range r {
		rel, err := filepath.Rel(root, abs)
		if err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return nil
		}
	}
	return fmt.Errorf("%w: %s %q is not under any --allow-root (%s)", ErrOutsideRoots, what, p, strings.Join(r, ", "))
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
