package files

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// maxLinks bounds the symlinks one walk follows, as the kernel's.
const maxLinks = 40

// dirHop is a directory a walk passed through, held open (O_PATH) so that
// what it checked is what it looks names up in.
type dirHop struct {
	fd   int
	st   unix.Stat_t
	path string
}

// reached is where a walk of a path for a caller ended.
type reached struct {
	// dir is the directory holding the final name, or, when a component is
	// missing, the deepest directory that exists; dirPath is its path.
	dir     unix.Stat_t
	dirPath string
	// final is the file the path names, its symlinks followed, when it
	// exists (missing is empty).
	final unix.Stat_t
	// missing are the components from the first that does not exist.
	missing []string
}

// reach resolves path as the kernel would for a process of c's, checking
// c's rights on the way: from "/", one component at a time, following
// symlinks, each directory it looks a name up in must grant c Search (else
// an *AccessError naming it, with what and path). Each directory is held
// open while it is used, so a directory swapped for a link after its check
// is not followed; the final file is only described (lstat, then, with
// followLast, its link's target), never opened, so a FIFO does not block
// the walk.
func (c Caller) reach(what, path string, followLast bool) (reached, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return reached{}, err
	}
	top, err := openHop(unix.AT_FDCWD, "/", "/")
	if err != nil {
		return reached{}, err
	}
	stack := []dirHop{top}
	defer func() {
		for _, h := range stack {
			unix.Close(h.fd)
		}
	}()
	comps, links := split(abs), 0
	for len(comps) > 0 {
		name := comps[0]
		comps = comps[1:]
		cur := stack[len(stack)-1]
		if name == "." {
			continue
		}
		if !c.Permits(inodeOf(&cur.st), Search) {
			return reached{}, &AccessError{What: what, Path: path, At: cur.path, Caller: c, Need: Search, Inode: inodeOf(&cur.st)}
		}
		if name == ".." {
			if len(stack) > 1 {
				unix.Close(cur.fd)
				stack = stack[:len(stack)-1]
			}
			continue
		}
		next := filepath.Join(cur.path, name)
		var st unix.Stat_t
		switch err := unix.Fstatat(cur.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
		case errors.Is(err, unix.ENOENT):
			return reached{dir: cur.st, dirPath: cur.path, missing: append([]string{name}, comps...)}, nil
		case err != nil:
			return reached{}, &fs.PathError{Op: "stat", Path: next, Err: err}
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK && (followLast || len(comps) > 0) {
			if links++; links > maxLinks {
				return reached{}, &fs.PathError{Op: "open", Path: abs, Err: unix.ELOOP}
			}
			target, err := readlinkat(cur.fd, name)
			if err != nil {
				return reached{}, &fs.PathError{Op: "readlink", Path: next, Err: err}
			}
			if filepath.IsAbs(target) {
				for _, h := range stack[1:] {
					unix.Close(h.fd)
				}
				stack = stack[:1]
			}
			comps = append(split(target), comps...)
			continue
		}
		if len(comps) == 0 {
			return reached{dir: cur.st, dirPath: cur.path, final: st}, nil
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return reached{}, &fs.PathError{Op: "open", Path: next, Err: unix.ENOTDIR}
		}
		h, err := openHop(cur.fd, name, next)
		if err != nil {
			return reached{}, err
		}
		stack = append(stack, h)
	}
	// The path ended on a directory of the stack ("/", or "..").
	last := stack[len(stack)-1]
	parent := stack[max(0, len(stack)-2)]
	return reached{dir: parent.st, dirPath: parent.path, final: last.st}, nil
}

// openHop opens the directory name of dirfd without following a link and
// describes it.
func openHop(dirfd int, name, path string) (dirHop, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return dirHop{}, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	h := dirHop{fd: fd, path: path}
	if err := unix.Fstat(fd, &h.st); err != nil {
		unix.Close(fd)
		return dirHop{}, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	return h, nil
}

// readlinkat reads the target of the symlink name in dirfd.
func readlinkat(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
		if size >= unix.PathMax {
			return "", unix.ENAMETOOLONG
		}
	}
}

// split cuts a path into its components, dropping empty ones.
func split(p string) []string {
	return strings.FieldsFunc(p, func(r rune) bool { return r == '/' })
}
