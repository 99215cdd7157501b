package state

import (
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

func (d dirFolder) ReadFile(name string) ([]byte, error) {
	return os.ReadFile(filepath.Join(string(d), name))
}

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
