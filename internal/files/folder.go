package files

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Folder is a directory a job names, such as a checkpoint folder to resume
// from or save into, reached through Roots: every file read or written in it
// is checked and opened as Roots opens files. Names are relative to the
// folder.
//
// A Folder made For a caller of another user than the daemon's reads and
// writes with the caller's rights, not the daemon's: before each operation
// the path is walked as the caller's process would walk it (Caller.reach),
// and the file or directory the daemon then opens must be the one the walk
// found.
type Folder struct {
	roots      *Roots
	what, path string
	// caller, when set, is the user the folder is read or written for.
	caller *Caller
	// daemonUID is the daemon's effective uid.
	daemonUID uint32
}

// urlScheme matches a path that is a URL (s3://, gs://, file://), which a
// folder never is.
var urlScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://`)

// Folder checks that path lies under a root (see Check) and returns it as a
// Folder; what names it in errors ("resume_from", "save folder").
func (r *Roots) Folder(what, path string) (*Folder, error) {
	if urlScheme.MatchString(path) {
		return nil, &FileError{Path: path, Reason: fmt.Sprintf("%s: state is saved and resumed in a local (or mounted) folder, not object storage or another URL", what)}
	}
	if err := r.Check(what, path); err != nil {
		return nil, err
	}
	return &Folder{roots: r, what: what, path: path, daemonUID: uint32(os.Geteuid())}, nil
}

// For is the folder read and written with c's rights (see Folder). For
// the daemon's own user it is f: the kernel checks the daemon's accesses
// with that user's rights already, ACLs included.
func (f *Folder) For(c Caller) *Folder {
	if c.UID == f.daemonUID {
		return f
	}
	g := *f
	g.caller = &c
	return &g
}

// Path is the folder's path as the job named it.
func (f *Folder) Path() string { return f.path }

func (f *Folder) join(name string) string { return filepath.Join(f.path, name) }

// ReadDir lists the directory name, sorted by name. Something else in its
// place (a FIFO) is refused without blocking.
func (f *Folder) ReadDir(name string) ([]fs.DirEntry, error) {
	path := f.join(name)
	var at reached
	if f.caller != nil {
		var err error
		if at, err = f.reachExisting(path); err != nil {
			return nil, err
		}
		if !f.caller.Permits(inodeOf(&at.final), Read) {
			return nil, f.denied(path, Read, &at.final)
		}
	}
	d, err := f.roots.openDir(f.what, path)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	if f.caller != nil {
		if err := f.same(path, &at.final)(d.Stat()); err != nil {
			return nil, err
		}
	}
	entries, err := d.ReadDir(-1)
	if err != nil {
		return nil, &fs.PathError{Op: "readdirent", Path: path, Err: unwrapPath(err)}
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, nil
}

// MaxStateFile bounds a file a folder reads, whatever limit its reader
// gives: a rank's state, a few dozen bytes per shard and dataset (stream
// bounds those at 2^22).
const MaxStateFile = 256 << 20

// ReadFile reads the file name, which must be a regular file of at most
// limit bytes (and MaxStateFile). Its size is read from the opened file,
// through any link, before a byte of it is: a larger one is refused unread,
// and one that grows past the bound while it is read is refused having
// read no more than the bound and a byte (Roots.ReadRegular); either is a
// *FileError whose Oversized gives its size and the bound.
func (f *Folder) ReadFile(name string, limit int64) ([]byte, error) {
	path := f.join(name)
	limit = min(limit, MaxStateFile)
	if f.caller == nil {
		return f.roots.ReadRegular(f.what, path, limit)
	}
	at, err := f.reachExisting(path)
	if err != nil {
		return nil, err
	}
	if !f.caller.Permits(inodeOf(&at.final), Read) {
		return nil, f.denied(path, Read, &at.final)
	}
	return f.roots.readRegular(f.what, path, limit, func(info fs.FileInfo) error {
		return f.same(path, &at.final)(info, nil)
	})
}

// MaxPrefix bounds the bytes ReadPrefix reads of a file.
const MaxPrefix = 1 << 20

// ReadPrefix reads at most the first n bytes (and MaxPrefix) of the file
// name, which must be a regular file, whatever its size: fewer when it is
// shorter. It is opened and checked as ReadFile opens and checks a file,
// a FIFO or device refused without blocking.
func (f *Folder) ReadPrefix(name string, n int64) ([]byte, error) {
	path := f.join(name)
	n = min(n, MaxPrefix)
	if f.caller == nil {
		return f.roots.readPrefix(f.what, path, n, nil)
	}
	at, err := f.reachExisting(path)
	if err != nil {
		return nil, err
	}
	if !f.caller.Permits(inodeOf(&at.final), Read) {
		return nil, f.denied(path, Read, &at.final)
	}
	return f.roots.readPrefix(f.what, path, n, func(info fs.FileInfo) error {
		return f.same(path, &at.final)(info, nil)
	})
}

// MkdirAll makes the directory name and its missing parents. For a caller,
// the deepest directory that exists must grant it write and search, and
// the directories are made in that very directory: it is opened, checked
// to be the one the walk as the caller found, and each missing directory
// is made by the descriptor of the one before (makeMissing), so a path
// component swapped for a symlink after the check is not followed. A
// daemon running as root gives the directories it makes to the caller.
func (f *Folder) MkdirAll(name string) error {
	path := f.join(name)
	if f.caller == nil {
		return f.daemonFailed("write", f.roots.MkdirAll(f.what, path, 0o755))
	}
	if err := f.mayWrite(); err != nil {
		return err
	}
	at, err := f.reach(path, true)
	if err != nil {
		return err
	}
	if len(at.missing) == 0 {
		if at.final.Mode&unix.S_IFMT != unix.S_IFDIR {
			return &fs.PathError{Op: "mkdir", Path: path, Err: unix.ENOTDIR}
		}
		return nil
	}
	if !f.caller.Permits(inodeOf(&at.dir), Write|Search) {
		return f.denied(at.dirPath, Write|Search, &at.dir)
	}
	d, err := f.roots.openDir(f.what, at.dirPath)
	if err != nil {
		return f.daemonFailed("write", err)
	}
	defer d.Close()
	if err := f.same(at.dirPath, &at.dir)(d.Stat()); err != nil {
		return err
	}
	if beforeMkdir != nil {
		beforeMkdir()
	}
	return f.daemonFailed("write", f.makeMissing(d, at.dirPath, at.missing))
}

// beforeMkdir, when set (by tests), runs once the directory a caller's
// MkdirAll makes its first directory in is opened and checked, before
// anything is made.
var beforeMkdir func()

// makeMissing makes the directories missing names (a path's components
// from the first that does not exist), each in the one before, the first
// in d, the directory at dirPath: by mkdirat on the parent's descriptor,
// then openat without following a link, so no name is looked up by path.
// Each directory made is synced into its parent, so that a folder a save
// made survives a power loss with the file written into it.
func (f *Folder) makeMissing(d *os.File, dirPath string, missing []string) error {
	parent, parentPath := d, dirPath
	var opened []*os.File
	defer func() {
		for _, o := range opened {
			o.Close()
		}
	}()
	for i, name := range missing {
		path := filepath.Join(parentPath, name)
		switch name {
		case ".":
			continue
		case "..": // a symlink's target climbing out of a directory that does not exist
			return &fs.PathError{Op: "mkdir", Path: path, Err: unix.ENOENT}
		}
		made := true
		if err := unix.Mkdirat(int(parent.Fd()), name, 0o755); errors.Is(err, unix.EEXIST) {
			made = false
		} else if err != nil {
			return &fs.PathError{Op: "mkdir", Path: path, Err: err}
		}
		fd, err := unix.Openat(int(parent.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &fs.PathError{Op: "open", Path: path, Err: err}
		}
		dir := os.NewFile(uintptr(fd), path)
		opened = append(opened, dir)
		if made {
			if err := parent.Sync(); err != nil {
				return err
			}
		}
		if err := f.take(dir, parent, made, i == len(missing)-1); err != nil {
			return err
		}
		parent, parentPath = dir, path
	}
	return nil
}

// take settles a directory makeMissing reached in parent: one the daemon
// made (it did, and the directory is the daemon's, empty, on the parent's
// device) a daemon running as root gives to the caller; one someone else
// made meanwhile must grant the caller write and search, as the directory
// checked did, when anything is to be made in it.
func (f *Folder) take(dir, parent *os.File, made, last bool) error {
	var st, pst unix.Stat_t
	if err := unix.Fstat(int(dir.Fd()), &st); err != nil {
		return &fs.PathError{Op: "stat", Path: dir.Name(), Err: err}
	}
	if err := unix.Fstat(int(parent.Fd()), &pst); err != nil {
		return err
	}
	if made && st.Uid == f.daemonUID && st.Dev == pst.Dev {
		if _, err := dir.Readdirnames(1); errors.Is(err, io.EOF) {
			if f.gives() {
				return f.chown(dir)
			}
			return nil
		}
	}
	if !last && !f.caller.Permits(inodeOf(&st), Write|Search) {
		return f.denied(dir.Name(), Write|Search, &st)
	}
	return nil
}

// WriteFileAtomic replaces the file name's contents atomically (see
// Roots.WriteFileAtomic). For a caller, the file's directory must grant it
// write and search (and, sticky, let it replace the file there); a daemon
// running as root gives the file to the caller.
func (f *Folder) WriteFileAtomic(name string, data []byte) error {
	path := f.join(name)
	if f.caller == nil {
		return f.daemonFailed("write", f.roots.WriteFileAtomic(f.what, path, data))
	}
	if err := f.mayWrite(); err != nil {
		return err
	}
	at, err := f.reach(path, false)
	if err != nil {
		return err
	}
	switch {
	case len(at.missing) > 1:
		return &fs.PathError{Op: "open", Path: filepath.Dir(path), Err: fs.ErrNotExist}
	case !f.caller.Permits(inodeOf(&at.dir), Write|Search):
		return f.denied(at.dirPath, Write|Search, &at.dir)
	case len(at.missing) == 0 && !f.caller.MayReplace(inodeOf(&at.dir), inodeOf(&at.final)):
		return &AccessError{What: f.what, Path: f.path, At: path, Caller: *f.caller, Reason: fmt.Sprintf(
			"%s may not replace %s: it is another user's file in a sticky directory", f.caller, path)}
	}
	hooks := writeHooks{dir: func(info fs.FileInfo) error { return f.same(at.dirPath, &at.dir)(info, nil) }, caller: f.caller}
	if f.gives() {
		hooks.file = func(file *os.File) error { return f.chown(file) }
	}
	return f.daemonFailed("write", f.roots.writeFileAtomic(f.what, path, data, hooks))
}

// reach walks path for the caller (Caller.reach); a refusal names the
// folder as the request did.
func (f *Folder) reach(path string, followLast bool) (reached, error) {
	at, err := f.caller.reach(f.what, path, followLast)
	var ae *AccessError
	if errors.As(err, &ae) {
		ae.Path = f.path
	}
	return at, err
}

// reachExisting walks path for the caller; a missing file is an error
// that errors.Is(err, fs.ErrNotExist).
func (f *Folder) reachExisting(path string) (reached, error) {
	at, err := f.reach(path, true)
	if err == nil && len(at.missing) > 0 {
		err = &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
	}
	return at, err
}

// mayWrite refuses a save for a caller of another user than the daemon's
// when the daemon is not root: what it wrote would be its own user's, not
// the caller's, and the caller could not replace it in a later save.
// Root callers may.
func (f *Folder) mayWrite() error {
	c := f.caller
	if c.UID == 0 || c.UID == f.daemonUID || f.daemonUID == 0 {
		return nil
	}
	return &AccessError{What: f.what, Path: f.path, Caller: *c, Reason: fmt.Sprintf(
		"%s is not the daemon's user (uid %d), which is not root and cannot make the files of a save the caller's: "+
			"save the loader's state_dict() with the model instead (the trainer writes those files), or run the "+
			"trainer as the daemon's user", c, f.daemonUID)}
}

// gives reports whether what the daemon makes for the caller is given to
// it: a daemon running as root makes it as root.
func (f *Folder) gives() bool { return f.daemonUID == 0 && f.caller.UID != 0 }

// chown gives file to the caller.
func (f *Folder) chown(file *os.File) error {
	if err := file.Chown(int(f.caller.UID), int(f.caller.GID)); err != nil {
		return fmt.Errorf("give %s to %s: %w", file.Name(), f.caller, err)
	}
	return nil
}

// same checks that the file the daemon opened at path is the one the walk
// as the caller found (want): one swapped in meanwhile is refused.
func (f *Folder) same(path string, want *unix.Stat_t) func(fs.FileInfo, error) error {
	return func(info fs.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Dev == want.Dev && st.Ino == want.Ino {
			return nil
		}
		return &AccessError{What: f.what, Path: f.path, At: path, Caller: *f.caller,
			Reason: fmt.Sprintf("%s was replaced while %s's rights on it were checked", path, f.caller)}
	}
}

// denied is the error of the caller lacking need on at (described by st).
func (f *Folder) denied(at string, need Right, st *unix.Stat_t) error {
	return &AccessError{What: f.what, Path: f.path, At: at, Caller: *f.caller, Need: need, Inode: inodeOf(st)}
}

// daemonFailed restates a write the daemon's own rights or a read-only
// file system refused as an *AccessError naming the folder.
func (f *Folder) daemonFailed(op string, err error) error {
	if err == nil || errors.Is(err, ErrAccess) || !(errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS)) {
		return err
	}
	return &AccessError{What: f.what, Path: f.path, Reason: fmt.Sprintf("the daemon (uid %d) cannot %s it: %v", f.daemonUID, op, err)}
}
