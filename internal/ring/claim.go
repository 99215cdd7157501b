package ring

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// FilePrefix starts the name of every file a daemon makes in its shm
// directory.
const FilePrefix = "dataloaderd-"

// instanceHex is the length of an instance id: 8 random bytes in hex.
const instanceHex = 16

// FileName is the name of a session's file in the shm directory:
// dataloaderd-<instance>-<session>, or dataloaderd-<session> for a daemon
// without an instance (one that could not claim the directory).
func FileName(instance, session string) string {
	if instance == "" {
		return FilePrefix + session
	}
	return FilePrefix + instance + "-" + session
}

// Claim is one daemon's hold on the files it makes in a shm directory.
// The daemon takes a random instance id, holds a flock on
// dataloaderd-<instance>.lock for as long as it runs, and names its files
// dataloaderd-<instance>-<session>. The kernel drops the lock when the
// process dies, however it dies: a lock that can be taken belongs to a dead
// daemon, whose files SweepDead removes. Several daemons may share a
// directory; none touches the files of another that is alive.
type Claim struct {
	dir      string
	instance string
	lock     *os.File
}

// ClaimDir takes a new instance in dir: it creates the instance's lock
// file and locks it.
func ClaimDir(dir string) (*Claim, error) {
	for attempt := 0; attempt < 4; attempt++ {
		var b [instanceHex / 2]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		c := &Claim{dir: dir, instance: hex.EncodeToString(b[:])}
		ok, err := c.lockNew()
		if err != nil {
			return nil, err
		}
		if ok {
			return c, nil
		}
	}
	return nil, fmt.Errorf("lock file in %s: lost the race for a new instance 4 times", dir)
}

// lockNew creates and locks the claim's lock file; false when another
// daemon's sweep took the file for a dead one's between the creation and
// the lock (it removes it), so that the caller tries another instance.
func (c *Claim) lockNew() (bool, error) {
	path := c.lockPath()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("lock file: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return false, nil
		}
		os.Remove(path)
		return false, fmt.Errorf("lock %s: %w", path, err)
	}
	held, err := f.Stat()
	if err != nil {
		f.Close()
		return false, err
	}
	if named, err := os.Stat(path); err != nil || !os.SameFile(held, named) {
		f.Close()
		return false, nil
	}
	// For people: which process holds the instance.
	fmt.Fprintf(f, "%d\n", os.Getpid())
	c.lock = f
	return true, nil
}

func (c *Claim) lockPath() string {
	return filepath.Join(c.dir, FilePrefix+c.instance+".lock")
}

// Instance is the claim's instance id, for FileName.
func (c *Claim) Instance() string { return c.instance }

// LockPath is the claim's lock file.
func (c *Claim) LockPath() string { return c.lockPath() }

// SweepDead removes the files of every dead instance in the directory: the
// instances whose lock file nobody holds. It returns the paths removed.
// Files not named by an instance (another program's, or those of a daemon
// that had none) are left alone.
func (c *Claim) SweepDead() ([]string, error) {
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return nil, fmt.Errorf("sweep %s: %w", c.dir, err)
	}
	files := map[string][]string{}
	var locked []string
	for _, e := range entries {
		inst, isLock, ok := parseName(e.Name())
		switch {
		case !ok || inst == c.instance:
		case isLock:
			locked = append(locked, inst)
		default:
			files[inst] = append(files[inst], e.Name())
		}
	}
	var removed []string
	var errs []error
	for _, inst := range locked {
		gone, err := sweepInstance(c.dir, inst, files[inst])
		removed = append(removed, gone...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return removed, errors.Join(errs...)
}

// sweepInstance removes names and then the lock file of instance inst if
// its lock can be taken (the daemon holding it is gone); the lock file goes
// last, so that a sweep cut short is finished by the next one.
func sweepInstance(dir, inst string, names []string) ([]string, error) {
	lockPath := filepath.Join(dir, FilePrefix+inst+".lock")
	f, err := openLock(lockPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // swept meanwhile by another daemon
	}
	if errors.Is(err, errNotOurs) {
		return nil, nil // not a daemon's lock: another user's, or not a file
	}
	if err != nil {
		return nil, fmt.Errorf("sweep: %w", err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, nil // alive
		}
		return nil, fmt.Errorf("sweep: lock %s: %w", lockPath, err)
	}
	var removed []string
	var errs []error
	for _, name := range append(names, filepath.Base(lockPath)) {
		p := filepath.Join(dir, name)
		if !ownFile(p) {
			continue
		}
		switch err := os.Remove(p); {
		case err == nil:
			removed = append(removed, p)
		case !errors.Is(err, fs.ErrNotExist):
			errs = append(errs, fmt.Errorf("sweep: %w", err))
		}
	}
	return removed, errors.Join(errs...)
}

// errNotOurs: a name in the shm directory that looks like an instance's
// lock file but is not a regular file of the daemon's own user (a FIFO
// there would block an open; another user's file is not a dead daemon's).
var errNotOurs = errors.New("not a lock file of this user")

// openLock opens a lock file to test its lock: without blocking (a FIFO or
// a device answers at once), without following a link, and only when it is
// a regular file owned by the daemon's effective user.
func openLock(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, fmt.Errorf("%s: a symbolic link: %w", path, errNotOurs)
	case err != nil:
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != owner() {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: mode %o, owner %d: %w", path, st.Mode, st.Uid, errNotOurs)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// owner is the user whose files a sweep may take: the daemon's effective
// user (tests pretend to be another).
var owner = func() uint32 { return uint32(os.Geteuid()) }

// ownFile reports whether path is a file (not a link's target) of the
// daemon's effective user: a sweep removes nothing else.
func ownFile(path string) bool {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return false
	}
	return st.Uid == owner()
}

// Release removes the files of the claim's instance that are still there
// (its rings remove their own when they close), then its lock file, and
// drops the lock.
func (c *Claim) Release() error {
	if c.lock == nil {
		return nil
	}
	var errs []error
	if entries, err := os.ReadDir(c.dir); err == nil {
		for _, e := range entries {
			if inst, isLock, ok := parseName(e.Name()); ok && inst == c.instance && !isLock {
				if err := os.Remove(filepath.Join(c.dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
					errs = append(errs, err)
				}
			}
		}
	}
	if err := os.Remove(c.lockPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	errs = append(errs, c.lock.Close())
	c.lock = nil
	return errors.Join(errs...)
}

// parseName reads the instance out of the name of an instance's file or
// lock file; ok is false for any other name.
func parseName(name string) (inst string, isLock, ok bool) {
	rest, found := strings.CutPrefix(name, FilePrefix)
	if !found || len(rest) <= instanceHex {
		return "", false, false
	}
	inst = rest[:instanceHex]
	for _, r := range inst {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') {
			return "", false, false
		}
	}
	switch tail := rest[instanceHex:]; {
	case tail == ".lock":
		return inst, true, true
	case tail[0] == '-' && len(tail) > 1:
		return inst, false, true
	}
	return "", false, false
}
