package files

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPermits: the permission bits as the kernel reads them: one class
// applies (an owner whose bits lack a right does not get the group's),
// supplementary groups count, root passes but cannot execute a file with no
// execute bit.
func TestPermits(t *testing.T) {
	dir := func(perm uint32) uint32 { return unix.S_IFDIR | perm }
	file := func(perm uint32) uint32 { return unix.S_IFREG | perm }
	owner := Inode{UID: 1000, GID: 100}
	cases := []struct {
		name   string
		caller Caller
		mode   uint32
		want   Right
		ok     bool
	}{
		{"owner rwx", Caller{UID: 1000, GID: 5}, dir(0o700), Write | Search, true},
		{"owner lacks write", Caller{UID: 1000, GID: 5}, dir(0o500), Write | Search, false},
		{"owner not helped by group bits", Caller{UID: 1000, GID: 100}, file(0o070), Read, false},
		{"primary group", Caller{UID: 7, GID: 100}, file(0o040), Read, true},
		{"supplementary group", Caller{UID: 7, GID: 5, Groups: []uint32{3, 100}}, file(0o040), Read, true},
		{"group not helped by other bits", Caller{UID: 7, GID: 100}, file(0o004), Read, false},
		{"other", Caller{UID: 7, GID: 5}, dir(0o751), Search, true},
		{"other may not list", Caller{UID: 7, GID: 5}, dir(0o751), Read, false},
		{"other 0700", Caller{UID: 7, GID: 5}, dir(0o700), Search, false},
		{"root reads 0000", Caller{UID: 0}, file(0), Read | Write, true},
		{"root searches 0000 dir", Caller{UID: 0}, dir(0), Search, true},
		{"root cannot execute a file without x", Caller{UID: 0}, file(0o644), Search, false},
		{"root executes a file with one x", Caller{UID: 0}, file(0o001), Search, true},
	}
	for _, c := range cases {
		in := owner
		in.Mode = c.mode
		if got := c.caller.Permits(in, c.want); got != c.ok {
			t.Errorf("%s: Permits(%v, %v) = %v, want %v", c.name, fileMode(c.mode), c.want, got, c.ok)
		}
	}
	sticky := Inode{Mode: unix.S_IFDIR | unix.S_ISVTX | 0o777, UID: 0}
	theirs, mine := Inode{Mode: unix.S_IFREG | 0o644, UID: 1000}, Inode{Mode: unix.S_IFREG | 0o644, UID: 7}
	if (Caller{UID: 7}).MayReplace(sticky, theirs) || !(Caller{UID: 7}).MayReplace(sticky, mine) ||
		!(Caller{UID: 0}).MayReplace(sticky, theirs) || !(Caller{UID: 7}).MayReplace(Inode{Mode: unix.S_IFDIR | 0o777}, theirs) {
		t.Error("MayReplace: only the file's or directory's owner, or root, replaces in a sticky directory")
	}
}

// stranger is a user who owns nothing the test makes and is in none of its
// groups.
func stranger() Caller {
	return Caller{UID: uint32(os.Getuid()) + 4242, GID: uint32(os.Getgid()) + 4242}
}

// openTemp is a temp dir that others may search, in one that they may.
func openTemp(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func mkdir(t *testing.T, path string, perm os.FileMode) string {
	t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestReach: a walk as a caller checks search on every directory it looks
// a name up in, symlinks resolved (relative, absolute, through ".."), stops
// at the first missing component, does not follow a last link when told,
// and gives up on a loop.
func TestReach(t *testing.T) {
	base := openTemp(t)
	closed := mkdir(t, filepath.Join(base, "closed"), 0o700)
	mkdir(t, filepath.Join(closed, "in"), 0o777)
	open := mkdir(t, filepath.Join(base, "open"), 0o755)
	if err := os.WriteFile(filepath.Join(open, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for target, name := range map[string]string{
		"closed":                         "rel",
		closed:                           "abs",
		"open/../closed":                 "dotdot",
		"f":                              "open/link",
		filepath.Join(base, "loop"):      "loop",
		filepath.Join(base, "open", "f"): "open/abs",
	} {
		if err := os.Symlink(target, filepath.Join(base, name)); err != nil {
			t.Fatal(err)
		}
	}
	c := stranger()
	for _, name := range []string{"closed/in", "rel/in", "abs/in", "dotdot/in"} {
		_, err := c.reach("save folder", filepath.Join(base, name), true)
		var ae *AccessError
		if !errors.As(err, &ae) || ae.At != closed || ae.Need != Search ||
			!strings.Contains(err.Error(), "uid "+strconv.FormatUint(uint64(c.UID), 10)) || !strings.Contains(err.Error(), "may not search "+closed) {
			t.Errorf("%s: err = %v, want an AccessError at %s", name, err, closed)
		}
	}
	at, err := c.reach("resume_from", filepath.Join(base, "open", "link"), true)
	if err != nil || at.final.Mode&unix.S_IFMT != unix.S_IFREG || c.Permits(inodeOf(&at.final), Read) || at.dirPath != open {
		t.Errorf("open/link: %+v, %v: want the 0600 file f, not readable by a stranger", at, err)
	}
	if at, err := c.reach("save folder", filepath.Join(base, "open", "link"), false); err != nil || at.final.Mode&unix.S_IFMT != unix.S_IFLNK {
		t.Errorf("open/link not followed: %+v, %v: want the link itself", at, err)
	}
	at, err = c.reach("save folder", filepath.Join(base, "open", "x", "y"), true)
	if err != nil || at.dirPath != open || strings.Join(at.missing, "/") != "x/y" {
		t.Errorf("missing x/y: %+v, %v", at, err)
	}
	if _, err := c.reach("save folder", filepath.Join(base, "loop"), true); !errors.Is(err, unix.ELOOP) {
		t.Errorf("a link to itself: %v, want ELOOP", err)
	}
	if _, err := c.reach("save folder", filepath.Join(base, "open", "f", "x"), true); !errors.Is(err, unix.ENOTDIR) {
		t.Errorf("a file as a directory: %v, want ENOTDIR", err)
	}
}

// TestFolderForCaller: a folder read or written for another user than the
// daemon's refuses what that user may not: a save into a folder it cannot
// write, a resume from a file or directory it cannot read, each with an
// *AccessError naming the path and the user. A FIFO in place of a rank
// file is refused without blocking.
func TestFolderForCaller(t *testing.T) {
	base := openTemp(t)
	mine := mkdir(t, filepath.Join(base, "mine", "dataloader"), 0o755)
	if err := os.WriteFile(filepath.Join(mine, "rank-0-of-1.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	private := mkdir(t, filepath.Join(base, "private"), 0o700)
	roots, _ := NewRoots(nil)
	c := stranger()
	folder := func(path string) *Folder {
		f, err := roots.Folder("save folder", path)
		if err != nil {
			t.Fatal(err)
		}
		f.daemonUID = 0 // as a daemon run as root, which could write anything
		return f.For(c)
	}
	denied := func(what string, err error, at string) {
		t.Helper()
		var ae *AccessError
		if !errors.As(err, &ae) || !errors.Is(err, ErrAccess) || ae.At != at || !strings.Contains(err.Error(), c.String()) {
			t.Errorf("%s: err = %v, want an AccessError at %s for %s", what, err, at, c)
		}
	}
	denied("save into a 0700 folder", folder(private).MkdirAll("dataloader"), private)
	denied("save into another's 0755 dataloader/", folder(filepath.Join(base, "mine")).WriteFileAtomic("dataloader/rank-0-of-1.json", []byte("{}")), mine)
	_, err := folder(filepath.Join(base, "mine")).ReadFile("dataloader/rank-0-of-1.json", MaxStateFile)
	denied("resume from a 0600 file", err, filepath.Join(mine, "rank-0-of-1.json"))
	_, err = folder(base).ReadDir("private")
	denied("list a 0700 directory", err, private)
	if b, err := os.ReadFile(filepath.Join(mine, "rank-0-of-1.json")); err != nil || string(b) != "{}" {
		t.Fatalf("the owner's rank file after the refusals: %q, %v", b, err)
	}

	// A FIFO named as a rank file, readable by all: refused, not waited on.
	fifo := mkdir(t, filepath.Join(base, "fifo", "dataloader"), 0o755)
	if err := unix.Mkfifo(filepath.Join(fifo, "rank-0-of-1.json"), 0o666); err != nil {
		t.Fatal(err)
	}
	_, err = folder(filepath.Join(base, "fifo")).ReadFile("dataloader/rank-0-of-1.json", MaxStateFile)
	if fe := (*FileError)(nil); !errors.As(err, &fe) || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a FIFO rank file: %v, want a FileError", err)
	}

	// Not root, the daemon refuses a save for another user: what it wrote
	// would be its own user's.
	f := folder(mkdir(t, filepath.Join(base, "shared"), 0o777))
	f.daemonUID = c.UID + 1
	if err := f.MkdirAll("dataloader"); !errors.Is(err, ErrAccess) || !strings.Contains(err.Error(), "not the daemon's user") {
		t.Errorf("a save for another user by a daemon not root: %v", err)
	}
}

// TestFolderGivesToCaller: a daemon run as root gives the directories and
// the file a save makes for another user to that user; the same save as
// the daemon's own user keeps them its own. Not root, the test checks the
// second only.
func TestFolderGivesToCaller(t *testing.T) {
	base := mkdir(t, openTemp(t), 0o777)
	roots, _ := NewRoots(nil)
	c := stranger()
	if os.Geteuid() != 0 {
		c = Caller{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}
	}
	f, err := roots.Folder("save folder", filepath.Join(base, "ckpt"))
	if err != nil {
		t.Fatal(err)
	}
	f = f.For(c)
	if err := f.MkdirAll("dataloader"); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteFileAtomic("dataloader/rank-0-of-1.json", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteFileAtomic("dataloader/rank-0-of-1.json", []byte("{ }")); err != nil {
		t.Fatalf("a second save into the folder: %v", err)
	}
	for _, p := range []string{"ckpt", "ckpt/dataloader", "ckpt/dataloader/rank-0-of-1.json"} {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(base, p), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != c.UID || st.Gid != c.GID {
			t.Errorf("%s belongs to %d:%d, want the caller's %d:%d", p, st.Uid, st.Gid, c.UID, c.GID)
		}
	}
}

// TestFolderNamesWhatTheDaemonCannotWrite: a write refused by the daemon's
// own rights or a read-only file system is an *AccessError naming the
// folder; a swapped file is refused.
func TestFolderNamesWhatTheDaemonCannotWrite(t *testing.T) {
	roots, _ := NewRoots(nil)
	f, err := roots.Folder("save folder", "/ckpt/x")
	if err != nil {
		t.Fatal(err)
	}
	for _, errno := range []syscall.Errno{syscall.EROFS, syscall.EACCES, syscall.EPERM} {
		err := f.daemonFailed("write", &fs.PathError{Op: "mkdir", Path: "/ckpt/x/dataloader", Err: errno})
		if !errors.Is(err, ErrAccess) || !strings.Contains(err.Error(), `save folder "/ckpt/x"`) ||
			!strings.Contains(err.Error(), errno.Error()) {
			t.Errorf("%v: %v", errno, err)
		}
	}
	if err := f.daemonFailed("write", syscall.ENOSPC); !errors.Is(err, syscall.ENOSPC) || errors.Is(err, ErrAccess) {
		t.Errorf("ENOSPC: %v, want it as it is", err)
	}
	dir := t.TempDir()
	info, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	var other unix.Stat_t
	if err := unix.Stat("/", &other); err != nil {
		t.Fatal(err)
	}
	g := f.For(stranger())
	if err := g.same(dir, &other)(info, nil); !errors.Is(err, ErrAccess) || !strings.Contains(err.Error(), "replaced") {
		t.Errorf("a directory other than the one checked: %v", err)
	}
}

// TestFolderFIFOsDoNotBlock: a FIFO named dataloader/ or as a rank file
// is refused at once. A probe opens the FIFO named dataloader/ for writing
// without blocking, which succeeds only while someone has it open for
// reading: before, with --allow-root, listing dataloader/ opened it so
// and waited (an open session hung in the daemon until a writer came). A
// rank file is opened without blocking (O_NONBLOCK), then refused.
func TestFolderFIFOsDoNotBlock(t *testing.T) {
	base := openTemp(t)
	roots, _ := NewRoots([]string{base})
	dirFIFO := filepath.Join(base, "a", "dataloader")
	fileFIFO := filepath.Join(base, "b", "dataloader", "rank-0-of-1.json")
	for _, p := range []string{dirFIFO, fileFIFO} {
		mkdir(t, filepath.Dir(p), 0o755)
		if err := unix.Mkfifo(p, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	probed := make(chan string, 1)
	go func() {
		for {
			select {
			case <-stop:
				close(probed)
				return
			default:
			}
			if fd, err := unix.Open(dirFIFO, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
				unix.Close(fd)
				probed <- dirFIFO
				<-stop
			}
		}
	}()
	for _, c := range []Caller{{UID: uint32(os.Geteuid())}, stranger()} {
		a, _ := roots.Folder("resume_from", filepath.Join(base, "a"))
		if _, err := a.For(c).ReadDir("dataloader"); !errors.Is(err, unix.ENOTDIR) {
			t.Errorf("%s: a FIFO as dataloader/: %v, want ENOTDIR", c, err)
		}
		b, _ := roots.Folder("resume_from", filepath.Join(base, "b"))
		if _, err := b.For(c).ReadFile("dataloader/rank-0-of-1.json", MaxStateFile); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("%s: a FIFO as a rank file: %v", c, err)
		}
	}
	close(stop)
	for p := range probed {
		t.Errorf("%s was opened for reading, blocking until a writer came", p)
	}
}
