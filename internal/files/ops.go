package files

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dataloaderd/dataloaderd/internal/errkind"
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
// daemon's memory. The size is read from the opened file (fstat), whatever
// link led to it, before a byte is: a larger file is refused unread, with a
// *FileError whose Oversized gives its size and limit; see readBounded for
// one that grows while it is read.
func (r *Roots) ReadRegular(what, path string, limit int64) ([]byte, error) {
	return r.readRegular(what, path, limit, nil)
}

// afterStat, when set (by tests), runs once a file readRegular opened has
// been described and found within its limit, before it is read.
var afterStat func(*os.File)

// readRegular is ReadRegular, and calls check, when set, with the opened
// file's description before reading it.
func (r *Roots) readRegular(what, path string, limit int64, check func(fs.FileInfo) error) ([]byte, error) {
	return r.withRegular(what, path, check, func(f *os.File, info fs.FileInfo) ([]byte, error) {
		if info.Size() > limit {
			return nil, &FileError{Path: path, Size: info.Size(), Limit: limit,
				Reason: fmt.Sprintf("%d bytes, more than the %d this file may have; it was not read", info.Size(), limit)}
		}
		if afterStat != nil {
			afterStat(f)
		}
		return readBounded(f, path, info.Size(), limit)
	})
}

// readPrefix reads at most the first n bytes of a file that must be
// regular, whatever its size (fewer if it is shorter), into one buffer of
// n bytes; it calls check as readRegular does.
func (r *Roots) readPrefix(what, path string, n int64, check func(fs.FileInfo) error) ([]byte, error) {
	return r.withRegular(what, path, check, func(f *os.File, _ fs.FileInfo) ([]byte, error) {
		b := make([]byte, max(n, 0))
		m, err := io.ReadFull(f, b)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = nil
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: unwrapPath(err)}
		}
		return b[:m], nil
	})
}

// withRegular opens path without blocking, calls check (when set) with
// its description, refuses anything but a regular file, and hands the
// opened file and its description to read.
func (r *Roots) withRegular(what, path string, check func(fs.FileInfo) error, read func(*os.File, fs.FileInfo) ([]byte, error)) ([]byte, error) {
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
	if check != nil {
		if err := check(info); err != nil {
			return nil, err
		}
	}
	if !info.Mode().IsRegular() {
		return nil, &FileError{Path: path, Reason: fmt.Sprintf("not a regular file (mode %v)", info.Mode())}
	}
	return read(f, info)
}

// readBounded reads f, which was size bytes (at most limit) when it was
// described, into one buffer of that size and a byte more, so that a file
// read whole costs its size once. A file that fills the buffer grew since:
// it is described again and refused at once if it is now past limit, else
// read on into a buffer of its new size (at least twice the last, at most
// limit and a byte), and so on; one that fills limit and a byte is
// refused. Either refusal gives the size it has grown to.
func readBounded(f *os.File, path string, size, limit int64) ([]byte, error) {
	b := make([]byte, size+1)
	n, err := io.ReadFull(f, b)
	for err == nil { // it filled the buffer: it grew
		now := int64(n)
		if info, err := f.Stat(); err == nil {
			now = max(now, info.Size())
		}
		if now > limit {
			return nil, &FileError{Path: path, Size: now, Limit: limit, Reason: fmt.Sprintf(
				"grew from %d bytes when it was opened to %d while it was read, more than the %d this file may have", size, now, limit)}
		}
		grown := make([]byte, min(max(now+1, 2*int64(len(b)), 512), limit+1))
		copy(grown, b)
		b = grown
		var m int
		m, err = io.ReadFull(f, b[n:])
		n += m
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return b[:n], nil // as long as it was, or shorter
	}
	return nil, err
}

// MkdirAll makes a directory and its missing parents.
//
// Each directory it creates is fsynced into its parent, so that a folder a
// save made survives a power loss with the file written into it.
func (r *Roots) MkdirAll(what, dir string, perm fs.FileMode) error {
	_, err := r.mkdirAll(what, dir, perm)
	return err
}

// mkdirAll is MkdirAll, and returns the directories that were missing,
// shallowest first.
func (r *Roots) mkdirAll(what, dir string, perm fs.FileMode) ([]string, error) {
	var missing []string // deepest first
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := r.Stat(what, d); err == nil || !errors.Is(err, fs.ErrNotExist) || d == filepath.Dir(d) {
			break
		}
		missing = append(missing, d)
	}
	p, err := r.locate(what, dir)
	if err != nil {
		return nil, err
	}
	defer p.close()
	if err := p.mkdirAll(perm); err != nil {
		return nil, err
	}
	for _, d := range missing {
		if err := r.syncDir(what, filepath.Dir(d)); err != nil {
			return nil, err
		}
	}
	slices.Reverse(missing)
	return missing, nil
}

// openDir opens the directory path for reading (a FIFO or other file in
// its place fails at once: O_DIRECTORY).
func (r *Roots) openDir(what, path string) (*os.File, error) {
	p, err := r.locate(what, path)
	if err != nil {
		return nil, err
	}
	defer p.close()
	return p.openFlags(os.O_RDONLY | unix.O_DIRECTORY)
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

// FileError is a file that cannot be used as asked: not a regular file, too
// large to map, or refused by mmap.
type FileError struct {
	Path   string
	Reason string
	// Size and Limit are, for a file refused for its size, its size (at
	// least) and the bound it is over; zero for any other refusal.
	Size, Limit int64
}

// Error names the file and the reason.
func (e *FileError) Error() string { return fmt.Sprintf("file %q: %s", e.Path, e.Reason) }

// Is makes a FileError of kind errkind.BadFile.
func (e *FileError) Is(target error) bool { return target == errkind.BadFile }

// Oversized gives, for a file refused for its size, its size and the bound
// it is over; ok is false for any other refusal. The state package, which
// imports nothing of this one, knows a rank file refused for its size by
// this method.
func (e *FileError) Oversized() (size, limit int64, ok bool) {
	return e.Size, e.Limit, e.Size > e.Limit
}

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
