package files

import (
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
)

// Folder is a directory a job names, such as a checkpoint folder to resume
// from or save into, reached through Roots: every file read or written in it
// is checked and opened as Roots opens files. Names are relative to the
// folder.
type Folder struct {
	roots      *Roots
	what, path string
}

// Folder checks that path lies under a root (see Check) and returns it as a
// Folder; what names it in errors ("resume_from", "save folder").
func (r *Roots) Folder(what, path string) (*Folder, error) {
	if objstore.IsURL(path) {
		return nil, fmt.Errorf("%s %q: state is saved and resumed in a local (or mounted) folder, not object storage", what, path)
	}
	if err := r.Check(what, path); err != nil {
		return nil, err
	}
	return &Folder{roots: r, what: what, path: path}, nil
}

// Path is the folder's path as the job named it.
func (f *Folder) Path() string { return f.path }

func (f *Folder) join(name string) string { return filepath.Join(f.path, name) }

// ReadDir lists the directory name, sorted by name.
func (f *Folder) ReadDir(name string) ([]fs.DirEntry, error) {
	return f.roots.ReadDir(f.what, f.join(name))
}

// MaxStateFile bounds a file a folder reads: a rank's state, a few dozen
// bytes per shard and dataset (stream bounds those at 2^22).
const MaxStateFile = 256 << 20

// ReadFile reads the file name, which must be a regular file of at most
// MaxStateFile bytes.
func (f *Folder) ReadFile(name string) ([]byte, error) {
	return f.roots.ReadRegular(f.what, f.join(name), MaxStateFile)
}

// MkdirAll makes the directory name and its missing parents.
func (f *Folder) MkdirAll(name string) error {
	return f.roots.MkdirAll(f.what, f.join(name), 0o755)
}

// WriteFileAtomic replaces the file name's contents atomically (see
// Roots.WriteFileAtomic).
func (f *Folder) WriteFileAtomic(name string, data []byte) error {
	return f.roots.WriteFileAtomic(f.what, f.join(name), data)
}
