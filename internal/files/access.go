package files

import (
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dataloaderd/dataloaderd/internal/errkind"
)

// ErrAccess marks a file or folder of a request refused because the user
// who made the request may not read or write it (or the daemon cannot).
var ErrAccess = errkind.New(errkind.PermissionDenied, "access denied")

// Caller is the user a file of a request is read or written for: the
// calling process's uid, gid and supplementary groups, as the kernel told
// them when it connected (SO_PEERCRED, SO_PEERGROUPS).
type Caller struct {
	UID, GID uint32
	Groups   []uint32
}

// String names the caller in errors.
func (c Caller) String() string { return fmt.Sprintf("uid %d (gid %d)", c.UID, c.GID) }

func (c Caller) inGroup(gid uint32) bool { return c.GID == gid || slices.Contains(c.Groups, gid) }

// Right is a set of access rights, valued as the permission bits of one
// class of a mode.
type Right uint32

// Rights.
const (
	// Search is a directory's execute bit: looking a name up in it.
	Search Right = 1
	Write  Right = 2
	Read   Right = 4
)

// String names the rights, as in "may not write and search".
func (r Right) String() string {
	var parts []string
	for _, x := range []struct {
		r    Right
		name string
	}{{Read, "read"}, {Write, "write"}, {Search, "search"}} {
		if r&x.r != 0 {
			parts = append(parts, x.name)
		}
	}
	return strings.Join(parts, " and ")
}

// Inode is what an access check reads of a file: its type and permission
// bits (st_mode), its owner and its group.
type Inode struct {
	Mode     uint32
	UID, GID uint32
}

func inodeOf(st *unix.Stat_t) Inode { return Inode{Mode: st.Mode, UID: st.Uid, GID: st.Gid} }

func (in Inode) isDir() bool { return in.Mode&unix.S_IFMT == unix.S_IFDIR }

// Permits reports whether c holds every right of want on a file of in, by
// its permission bits as the kernel checks them (POSIX ACLs, capabilities
// other than root's and security modules are not evaluated): the owner's
// class when c owns the file, else the group's when the file's group is c's
// primary or a supplementary group, else the others'. One class applies: an
// owner whose bits lack a right does not get it from the group's or the
// others'. Root holds every right, but execute of a file that is not a
// directory and has no execute bit.
func (c Caller) Permits(in Inode, want Right) bool {
	if c.UID == 0 {
		return want&Search == 0 || in.isDir() || in.Mode&0o111 != 0
	}
	bits := in.Mode
	switch {
	case c.UID == in.UID:
		bits >>= 6
	case c.inGroup(in.GID):
		bits >>= 3
	}
	return Right(bits&7)&want == want
}

// MayReplace reports whether c may remove or rename over the entry file of
// directory dir, given that it may write dir: in a sticky directory (/tmp)
// only the owner of the entry or of the directory, or root, may.
func (c Caller) MayReplace(dir, file Inode) bool {
	return dir.Mode&unix.S_ISVTX == 0 || c.UID == 0 || c.UID == file.UID || c.UID == dir.UID
}

// AccessError is a file or folder of a request refused by the rights of
// the user who made it, or that the daemon itself cannot write. It wraps
// ErrAccess.
type AccessError struct {
	// What names the path in the request ("save folder"), Path is the path
	// named, and At the file or directory that refused (Path or a
	// directory on the way to it).
	What, Path, At string
	Caller         Caller
	// Need is the right Caller lacks on At, whose mode, owner and group are
	// Inode.
	Need  Right
	Inode Inode
	// Reason, when set, replaces the sentence of rights.
	Reason string
}

// Error says what was refused, for whom, and by which rights.
func (e *AccessError) Error() string {
	head := fmt.Sprintf("%v: %s %q", ErrAccess, e.What, e.Path)
	if e.Reason != "" {
		return head + ": " + e.Reason
	}
	at := e.At
	if at == "" {
		at = e.Path
	}
	return fmt.Sprintf("%s: %s may not %s %s (mode %v, owner uid %d, group gid %d)", head, e.Caller, e.Need, at,
		fileMode(e.Inode.Mode), e.Inode.UID, e.Inode.GID)
}

// Unwrap makes errors.Is(err, ErrAccess) hold.
func (e *AccessError) Unwrap() error { return ErrAccess }

// fileMode is st_mode as an fs.FileMode, for messages.
func fileMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	}
	if m&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}
