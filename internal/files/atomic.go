package files

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

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
	return r.writeFileAtomic(what, path, data, writeHooks{})
}

// writeHooks are the checks and changes a write on a caller's behalf adds:
// dir is called with the opened directory's description before anything
// is written, file with the new file before it is linked in; caller, when
// set, is the user on whose behalf the daemon writes, whose stale temp
// files the write may sweep besides the daemon's own (sweepTemps).
type writeHooks struct {
	dir    func(fs.FileInfo) error
	file   func(*os.File) error
	caller *Caller
}

func (r *Roots) writeFileAtomic(what, path string, data []byte, hooks writeHooks) (err error) {
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
	if hooks.dir != nil {
		info, err := d.Stat()
		if err != nil {
			return err
		}
		if err := hooks.dir(info); err != nil {
			return err
		}
	}
	var suffix [8]byte
	_, _ = rand.Read(suffix[:])
	tmpName := "." + filepath.Base(path) + ".tmp" + hex.EncodeToString(suffix[:])
	tmp, target := p.child(tmpName), p.child(filepath.Base(path))
	placed, err := writeUnnamed(d, filepath.Base(path), tmpName, data, hooks.file)
	if errors.Is(err, errNoTmpfile) {
		err = writeNamed(tmp, data, hooks.file)
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
	owners := []uint32{uint32(os.Geteuid())}
	if hooks.caller != nil {
		owners = append(owners, hooks.caller.UID)
	}
	sweepTemps(p, d, tmpName, owners)
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
func writeUnnamed(d *os.File, name, tmp string, data []byte, own func(*os.File) error) (placed bool, err error) {
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
	if own != nil {
		if err := own(f); err != nil {
			return false, err
		}
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

// writeNamed writes data to the new file tmp, syncs it and calls own on it
// (when set); on failure tmp is removed.
func writeNamed(tmp place, data []byte, own func(*os.File) error) (err error) {
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
	if own != nil {
		if err := own(f); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// sweepTemps removes the temp files that atomic writes into directory d (p)
// left when they were killed (every file named .<name>.tmp<16 hex>), once
// they are stale, and only those of owners: the daemon's own user and the
// user it writes for. Another user's are not its to remove, though a daemon
// running as root could (in a sticky dataloader/ shared by several users,
// root may remove anyone's file). Best effort: one that cannot be removed
// stays for the next write.
func sweepTemps(p place, d *os.File, own string, owners []uint32) {
	entries, err := d.ReadDir(-1)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if name == own || !isTemp(name) {
			continue
		}
		info, err := e.Info() // the entry itself (lstat): its owner is the one a sticky directory asks for
		if err != nil || time.Since(info.ModTime()) <= staleTemp {
			continue
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && slices.Contains(owners, st.Uid) {
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
