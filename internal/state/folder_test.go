package state

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// dirFolder is a Folder on the host's file system, unconfined, for tests:
// the daemon's own is in the file layer, which state does not import.
type dirFolder string

func (d dirFolder) Path() string { return string(d) }

func (d dirFolder) ReadDir(name string) ([]fs.DirEntry, error) {
	return os.ReadDir(filepath.Join(string(d), name))
}

// ReadFile keeps the Folder's bound as the file layer's does: by the
// opened file's size, before reading.
func (d dirFolder) ReadFile(name string, limit int64) ([]byte, error) {
	f, err := os.Open(filepath.Join(string(d), name))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if info.Size() > limit {
		return nil, &sizeError{path: f.Name(), size: info.Size(), limit: limit}
	}
	return io.ReadAll(io.LimitReader(f, limit))
}

// ReadPrefix reads at most the first n bytes of a regular file.
func (d dirFolder) ReadPrefix(name string, n int64) ([]byte, error) {
	f, err := os.Open(filepath.Join(string(d), name))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, n))
}

// sizeError is dirFolder's refusal of a file larger than its limit.
type sizeError struct {
	path        string
	size, limit int64
}

func (e *sizeError) Error() string {
	return fmt.Sprintf("%s: %d bytes, more than %d", e.path, e.size, e.limit)
}

func (e *sizeError) Oversized() (size, limit int64, ok bool) { return e.size, e.limit, true }

func (d dirFolder) MkdirAll(name string) error {
	return os.MkdirAll(filepath.Join(string(d), name), 0o755)
}

// WriteFileAtomic writes a temp file beside the target and renames it.
func (d dirFolder) WriteFileAtomic(name string, data []byte) error {
	path := filepath.Join(string(d), name)
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
