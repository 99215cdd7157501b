package files

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dataloaderd/dataloaderd/internal/mapped"
)

// The operations below take what, the name of the path in the job (for
// example `dataset "web" file`), used only in an *OutsideError; their other
// errors read as those of the os function of the same name on path.

// Open opens a file for reading.
func (r *Roots) Open(what, path string) (*os.File, error) {
	p, err := r.locate(what, path)
	if err != nil {
		return nil, err
	}
	defer p.close()
	return p.open()
}

// Stat describes a file, following symlinks.
func (r *Roots) Stat(what, path string) (fs.FileInfo, error) {
	p, err := r.locate(what, path)
	if err != nil {
		return nil, err
	}
	defer p.close()
	return p.stat()
}

// ReadDir lists a directory, sorted by name.
func (r *Roots) ReadDir(what, dir string) ([]fs.DirEntry, error) {
	if !r.confined() {
		return os.ReadDir(dir)
	}
	f, err := r.Open(what, dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := f.ReadDir(-1)
	if err != nil {
		return nil, &fs.PathError{Op: "readdirent", Path: dir, Err: unwrapPath(err)}
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, nil
}

func unwrapPath(err error) error {
	if pe, ok := err.(*fs.PathError); ok {
		return pe.Err
	}
	return err
}

// MaxReadFile bounds the files ReadFile reads whole (a tokenizer.json is
// tens of MB).
const MaxReadFile = 1 << 30

// ReadFile reads a whole regular file of at most MaxReadFile bytes.
func (r *Roots) ReadFile(what, path string) ([]byte, error) {
	return r.ReadRegular(what, path, MaxReadFile)
}

// ReadRegular reads a whole file that must be regular and at most limit
// bytes long. Files named in requests are input from outside: a FIFO would
// block the open (it is opened without blocking, then refused), a device
// such as /dev/zero would be read without end, a huge file would take the
// daemon's memory.
func (r *Roots) ReadRegular(what, path string, limit int64) ([]byte, error) {
	p, err := r.locate(what, path)
	if err != nil {
		return nil, err
	}
	defer p.close()
	f, err := p.openFlags(os.O_RDONLY | unix.O_NONBLOCK)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, &FileError{Path: path, Reason: fmt.Sprintf("not a regular file (mode %v)", info.Mode())}
	}
	if info.Size() > limit {
		return nil, &FileError{Path: path, Reason: fmt.Sprintf("%d bytes, more than the %d this file may have", info.Size(), limit)}
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, &FileError{Path: path, Reason: fmt.Sprintf("grew past the %d bytes this file may have while read", limit)}
	}
	return b, nil
}

// MkdirAll makes a directory and its missing parents.
//
// Each directory it creates is fsynced into its parent, so that a folder a
// save made survives a power loss with the file written into it.
func (r *Roots) MkdirAll(what, dir string, perm fs.FileMode) error {
	var missing []string // deepest first
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := r.Stat(what, d); err == nil || !errors.Is(err, fs.ErrNotExist) || d == filepath.Dir(d) {
			break
		}
		missing = append(missing, d)
	}
	p, err := r.locate(what, dir)
	if err != nil {
		return err
	}
	defer p.close()
	if err := p.mkdirAll(perm); err != nil {
		return err
	}
	for _, d := range missing {
		if err := r.syncDir(what, filepath.Dir(d)); err != nil {
			return err
		}
	}
	return nil
}

// syncDir fsyncs directory dir: the entries made in it are on disk.
func (r *Roots) syncDir(what, dir string) error {
	p, err := r.locate(what, dir)
	if err != nil {
		return err
	}
	defer p.close()
	d, err := p.open()
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// staleTemp is the age past which a temp file of an atomic write is taken
// for one whose writer died (a kill mid-save): a save takes milliseconds.
const staleTemp = 10 * time.Minute

// WriteFileAtomic replaces path's contents with data so that a reader sees
// either the old file or the new one whole, even across a crash: it writes
// the data to a file of no name in the same directory (O_TMPFILE), syncs it,
// links it in as path when path does not exist (no temp name at all), else
// under a temporary name renamed over path at once, and syncs the
// directory. A writer killed before the link leaves nothing behind; one
// killed between the link and the rename of a replacing write (two system
// calls) leaves a temp file that a later write into the directory sweeps. Where the filesystem has no
// O_TMPFILE (or /proc is not mounted) the data goes to a named temp file
// from the start. The directory must exist.
func (r *Roots) WriteFileAtomic(what, path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	p, err := r.locate(what, dir)
	if err != nil {
		return err
	}
	defer p.close()
	d, err := p.open()
	if err != nil {
		return err
	}
	defer d.Close()
	var suffix [8]byte
	_, _ = rand.Read(suffix[:])
	tmpName := "." + filepath.Base(path) + ".tmp" + hex.EncodeToString(suffix[:])
	tmp, target := p.child(tmpName), p.child(filepath.Base(path))
	placed, err := writeUnnamed(d, filepath.Base(path), tmpName, data)
	if errors.Is(err, errNoTmpfile) {
		err = writeNamed(tmp, data)
	}
	if err != nil {
		return p.fail("write", err)
	}
	if !placed {
		if err := tmp.rename(target); err != nil {
			_ = tmp.remove()
			return err
		}
	}
	if err := d.Sync(); err != nil {
		return err
	}
	sweepTemps(p, d, tmpName)
	return nil
}

// errNoTmpfile: the directory's filesystem cannot make a file of no name
// and link it in; writeNamed does instead.
var errNoTmpfile = errors.New("O_TMPFILE not supported here")

// beforeLink, when set (by tests), runs after an unnamed temp file is
// written and synced, before it is linked into its directory.
var beforeLink func()

// openUnnamed opens a new file of no name in directory dirfd (a variable
// so that tests can take O_TMPFILE away).
var openUnnamed = func(dirfd int) (int, error) {
	return unix.Openat(dirfd, ".", unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
}

// writeUnnamed writes data to a file of no name in directory d, syncs it
// and links it in: straight under name when no file has it (a first save
// into a folder: no temp name ever exists), else under tmp and renamed over
// name at once, both by the directory's descriptor. placed reports that.
func writeUnnamed(d *os.File, name, tmp string, data []byte) (placed bool, err error) {
	fd, err := openUnnamed(int(d.Fd()))
	switch {
	case errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EINVAL) ||
		errors.Is(err, unix.ENOENT):
		return false, errNoTmpfile
	case err != nil:
		return false, &fs.PathError{Op: "open", Path: filepath.Join(d.Name(), tmp), Err: err}
	}
	f := os.NewFile(uintptr(fd), filepath.Join(d.Name(), tmp))
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		return false, err
	}
	if err := f.Sync(); err != nil {
		return false, err
	}
	if beforeLink != nil {
		beforeLink()
	}
	self := fmt.Sprintf("/proc/self/fd/%d", fd)
	dirfd := int(d.Fd())
	err = unix.Linkat(unix.AT_FDCWD, self, dirfd, name, unix.AT_SYMLINK_FOLLOW)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, unix.EEXIST) {
		// Replacing a file: linked under the temp name, renamed over it.
		if err = unix.Linkat(unix.AT_FDCWD, self, dirfd, tmp, unix.AT_SYMLINK_FOLLOW); err == nil {
			if err = unix.Renameat(dirfd, tmp, dirfd, name); err != nil {
				_ = unix.Unlinkat(dirfd, tmp, 0)
				return false, &fs.PathError{Op: "rename", Path: filepath.Join(d.Name(), name), Err: err}
			}
			return true, nil
		}
	}
	switch {
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EPERM):
		return false, errNoTmpfile // no /proc, or a link refused: write it by name
	default:
		return false, &fs.PathError{Op: "link", Path: filepath.Join(d.Name(), name), Err: err}
	}
}

// writeNamed writes data to the new file tmp and syncs it; on failure tmp
// is removed.
func writeNamed(tmp place, data []byte) (err error) {
	f, err := tmp.create(0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tmp.remove()
		}
	}()
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// sweepTemps removes the temp files that atomic writes into directory d (p)
// left when they were killed (every file named .<name>.tmp<16 hex>), once
// they are stale. Best effort: one that cannot be removed stays for the
// next write.
func sweepTemps(p place, d *os.File, own string) {
	entries, err := d.ReadDir(-1)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if name == own || !isTemp(name) {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > staleTemp {
			_ = p.child(name).remove()
		}
	}
}

// isTemp says whether name is that of an atomic write's temp file.
func isTemp(name string) bool {
	i := strings.LastIndex(name, ".tmp")
	if !strings.HasPrefix(name, ".") || i < 1 || len(name) != i+4+16 {
		return false
	}
	_, err := hex.DecodeString(name[i+4:])
	return err == nil
}

// child is the place of the entry name of directory p.
func (p place) child(name string) place {
	c := p
	c.name, c.path = filepath.Join(p.name, name), filepath.Join(p.path, name)
	return c
}

// FileError is a file that cannot be used as asked: not a regular file, too
// large to map, or refused by mmap.
type FileError struct {
	Path   string
	Reason string
}

// Error names the file and the reason.
func (e *FileError) Error() string { return fmt.Sprintf("file %q: %s", e.Path, e.Reason) }

// Map memory-maps a whole regular file read-only, opened through the roots.
// An empty file gives a nil mapping (mmap refuses zero lengths). Release it
// with Unmap.
func (r *Roots) Map(what, path string) ([]byte, error) {
	f, err := r.Open(what, path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, &FileError{Path: path, Reason: fmt.Sprintf("not a regular file (mode %v)", info.Mode())}
	}
	size := info.Size()
	if size == 0 {
		return nil, nil
	}
	if size > math.MaxInt {
		return nil, &FileError{Path: path, Reason: fmt.Sprintf("size %d bytes is too large to map", size)}
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, &FileError{Path: path, Reason: fmt.Sprintf("mmap: %v", err)}
	}
	mapped.Register(data, path)
	return data, nil
}

// Unmap releases a mapping made by Map.
func Unmap(data []byte) error {
	if len(data) == 0 {
		return nil
	}
	mapped.Unregister(data)
	return unix.Munmap(data)
}
