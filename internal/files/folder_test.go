package files

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// allocated is the heap the process allocated while fn ran.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// sparse makes path a file of size bytes that takes no disk.
func sparse(t *testing.T, path string, size int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
}

// wantOversized checks that err refuses path for its size, at least size
// bytes against limit, naming both.
func wantOversized(t *testing.T, what string, err error, path string, size, limit int64) {
	t.Helper()
	var fe *FileError
	if !errors.As(err, &fe) {
		t.Fatalf("%s: %v, want a *FileError", what, err)
	}
	got, lim, ok := fe.Oversized()
	if !ok || got < size || lim != limit || !strings.Contains(err.Error(), path) ||
		!strings.Contains(err.Error(), strconv.FormatInt(got, 10)) || !strings.Contains(err.Error(), strconv.FormatInt(limit, 10)) {
		t.Fatalf("%s: %v (Oversized %d, %d, %v), want %s refused at %d bytes or more against %d", what, err, got, lim, ok, path, size, limit)
	}
}

// TestFolderReadBoundedByOpenedFile: a rank file is bounded by the size of
// the file opened, not of the name listed: a symlink to a 200 MiB file, or
// a file that grows to 200 MiB once opened, is refused against an 8 MiB
// limit with next to nothing allocated (under 1 MiB); a file that grows
// within its limit is read whole. Before, the
// caller checked the listing's lstat (a link's own size) and ReadFile read
// up to 256 MiB with io.ReadAll: 410 MiB allocated for the 200 MiB target
// (issue 23).
func TestFolderReadBoundedByOpenedFile(t *testing.T) {
	const big, limit = 200 << 20, 8 << 20
	base := openTemp(t)
	ckpt := mkdir(t, filepath.Join(base, "ckpt", "dataloader"), 0o755)
	target := filepath.Join(base, "elsewhere.bin")
	sparse(t, target, big)
	link := filepath.Join(ckpt, "rank-0-of-2.json")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	growing := filepath.Join(ckpt, "rank-1-of-2.json")
	roots, _ := NewRoots([]string{base})
	for _, c := range []*Caller{nil, {UID: stranger().UID, GID: stranger().GID}} {
		f, err := roots.Folder("resume_from", filepath.Join(base, "ckpt"))
		if err != nil {
			t.Fatal(err)
		}
		who := "the daemon's user"
		if c != nil {
			f, who = f.For(*c), c.String()
		}
		var rerr error
		if n := allocated(func() { _, rerr = f.ReadFile("dataloader/rank-0-of-2.json", limit) }); n > 1<<20 {
			t.Errorf("%s: refusing a link to a %d-byte file allocated %d bytes", who, big, n)
		}
		wantOversized(t, who+": a link to a large file", rerr, link, big, limit)

		write(t, growing, strings.Repeat("x", 100))
		afterStat = func(*os.File) { sparse(t, growing, big) }
		n := allocated(func() { _, rerr = f.ReadFile("dataloader/rank-1-of-2.json", limit) })
		afterStat = nil
		if n > 1<<20 {
			t.Errorf("%s: a file grown to %d bytes while read allocated %d bytes against a limit of %d", who, big, n, limit)
		}
		wantOversized(t, who+": a file grown past the limit", rerr, growing, big, limit)
		if !strings.Contains(rerr.Error(), "grew from 100 bytes") {
			t.Errorf("%s: %v, want the size it had when opened", who, rerr)
		}

		write(t, growing, strings.Repeat("x", 100))
		afterStat = func(*os.File) { write(t, growing, strings.Repeat("y", 300)) }
		b, err := f.ReadFile("dataloader/rank-1-of-2.json", 1000)
		afterStat = nil
		if err != nil || string(b) != strings.Repeat("y", 300) {
			t.Errorf("%s: a file grown within its limit: %q, %v", who, b, err)
		}
	}
}

// TestReadRegularAllocatesItsSize: a file within its limit is read into
// one buffer of its size (and a byte), not grown by doubling: reading an
// 8 MiB file whole under a 256 MiB limit allocates about 8 MiB. Before,
// io.ReadAll allocated about twice and more.
func TestReadRegularAllocatesItsSize(t *testing.T) {
	const size = 8 << 20
	path := filepath.Join(t.TempDir(), "state.json")
	write(t, path, strings.Repeat("7", size))
	roots, _ := NewRoots(nil)
	var b []byte
	var err error
	n := allocated(func() { b, err = roots.ReadRegular("resume_from", path, MaxStateFile) })
	if err != nil || len(b) != size {
		t.Fatalf("read %d bytes, %v", len(b), err)
	}
	if n > size+size/8 {
		t.Errorf("reading %d bytes allocated %d", size, n)
	}
}

// TestFolderMkdirInCheckedDirectory: the directories a save makes for a
// caller are made in the directory whose rights were checked, by its
// descriptor: a path component swapped for a symlink to another user's
// folder after the check does not lead the daemon there. Before, the
// daemon (root) made them by path, through the link, root's, inside the
// other user's folder, and only then refused to give them away (issue 23).
func TestFolderMkdirInCheckedDirectory(t *testing.T) {
	base := openTemp(t)
	c := stranger()
	ckpt := mkdir(t, filepath.Join(base, "ckpt"), 0o777)
	victim := mkdir(t, filepath.Join(base, "victim"), 0o755) // the daemon's user's: the caller may not write it
	roots, _ := NewRoots([]string{base})
	f, err := roots.Folder("save folder", filepath.Join(ckpt, "run"))
	if err != nil {
		t.Fatal(err)
	}
	f.daemonUID = 0 // as a daemon run as root, which could write anything
	if os.Geteuid() != 0 {
		// Not root, the daemon cannot give directories away: the caller
		// is root instead, for whom it makes them all the same.
		c, f.daemonUID = Caller{UID: 0}, uint32(os.Geteuid())
	}
	f = f.For(c)
	moved := filepath.Join(base, "ckpt.moved")
	beforeMkdir = func() {
		if err := os.Rename(ckpt, moved); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(victim, ckpt); err != nil {
			t.Fatal(err)
		}
	}
	err = f.MkdirAll("dataloader")
	beforeMkdir = nil
	if entries, _ := os.ReadDir(victim); len(entries) != 0 {
		t.Fatalf("the daemon made %s in %s, the folder the swapped-in link leads to (MkdirAll: %v)", entries[0].Name(), victim, err)
	}
	if err != nil {
		t.Fatalf("MkdirAll: %v", err)
	}
	made := filepath.Join(moved, "run", "dataloader")
	for _, p := range []string{filepath.Dir(made), made} {
		info, err := os.Lstat(p)
		if err != nil || !info.IsDir() {
			t.Fatalf("%s: %v, want the directory made in the one checked", p, err)
		}
		if os.Geteuid() == 0 {
			if st := info.Sys().(*syscall.Stat_t); st.Uid != c.UID || st.Gid != c.GID {
				t.Errorf("%s belongs to %d:%d, want the caller's %d:%d", p, st.Uid, st.Gid, c.UID, c.GID)
			}
		}
	}
}

// TestSweepRemovesOnlyOwnedTemps: the sweep of stale temp files after a
// save removes those of the daemon's user and of the caller it saved for,
// never another user's, though the daemon runs as root and the directory
// is a shared sticky one. Before, every stale .<name>.tmp<hex> went,
// whoever owned it (issue 23). Making files of several users takes root
// (CI runs as root); not root, the sweep alone is checked, with the test's
// user as another's.
func TestSweepRemovesOnlyOwnedTemps(t *testing.T) {
	base := openTemp(t)
	shared := mkdir(t, filepath.Join(base, "ckpt", "dataloader"), 0o777|os.ModeSticky)
	c := stranger()
	other := c.UID + 1
	old := time.Now().Add(-time.Hour)
	temp := func(name string, uid uint32) string {
		p := filepath.Join(shared, "."+name+".tmp0123456789abcdef")
		write(t, p, "{")
		if uid != uint32(os.Geteuid()) {
			if err := os.Chown(p, int(uid), int(uid)); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
		return p
	}
	exists := func(p string) bool { _, err := os.Lstat(p); return err == nil }
	if me := uint32(os.Geteuid()); me != 0 {
		mine := temp("rank-0-of-1.json", me)
		d, err := os.Open(shared)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		sweepTemps(place{name: shared}, d, "", []uint32{me + 1, me + 2})
		if !exists(mine) {
			t.Fatalf("a sweep for uids %d and %d removed uid %d's temp file", me+1, me+2, me)
		}
		return
	}
	roots, _ := NewRoots([]string{base})
	f, err := roots.Folder("save folder", filepath.Join(base, "ckpt"))
	if err != nil {
		t.Fatal(err)
	}

	theirs, callers, daemons := temp("rank-0-of-3.json", other), temp("rank-1-of-3.json", c.UID), temp("rank-2-of-3.json", 0)
	if err := f.For(c).WriteFileAtomic("dataloader/rank-1-of-3.json", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if !exists(theirs) || exists(callers) || exists(daemons) {
		t.Errorf("a save for uid %d: another user's temp file there %v (want true), the caller's %v, the daemon's %v (want false)",
			c.UID, exists(theirs), exists(callers), exists(daemons))
	}

	callers = temp("rank-1-of-3.json", c.UID)
	if err := f.WriteFileAtomic("dataloader/rank-2-of-3.json", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if !exists(theirs) || !exists(callers) {
		t.Errorf("a save of the daemon's own user removed another user's temp file: uid %d's there %v, uid %d's %v",
			other, exists(theirs), c.UID, exists(callers))
	}
}

// TestReadRegularSizeUnknown: a file whose description says 0 bytes but
// that reads more (a /proc file) is read whole within its limit, and
// refused once it passes it, having read the limit and a byte.
func TestReadRegularSizeUnknown(t *testing.T) {
	roots, _ := NewRoots(nil)
	b, err := roots.ReadRegular("tokenizer", "/proc/self/status", 1<<20)
	if err != nil || !strings.Contains(string(b), "\nPid:") {
		t.Fatalf("/proc/self/status: %q, %v", b, err)
	}
	_, err = roots.ReadRegular("tokenizer", "/proc/self/status", 100)
	wantOversized(t, "/proc/self/status under 100 bytes", err, "/proc/self/status", 101, 100)
}

// TestFolderReadPrefix: ReadPrefix reads at most the bytes asked of a file
// whatever its size (4 KiB of a 200 MiB one, next to nothing allocated),
// a shorter file whole, refuses a FIFO without blocking, and, for another
// user, a file that user may not read, naming it. A resuming rank reads
// its peers' rank files this way, for their step alone.
func TestFolderReadPrefix(t *testing.T) {
	base := openTemp(t)
	dir := mkdir(t, filepath.Join(base, "dataloader"), 0o755)
	sparse(t, filepath.Join(dir, "big.json"), 200<<20)
	if err := os.WriteFile(filepath.Join(dir, "short.json"), []byte(`{"step":3}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "fifo.json"), 0o666); err != nil {
		t.Fatal(err)
	}
	roots, _ := NewRoots(nil)
	folder, err := roots.Folder("resume_from", base)
	if err != nil {
		t.Fatal(err)
	}
	var b []byte
	n := allocated(func() { b, err = folder.ReadPrefix("dataloader/big.json", 4096) })
	if err != nil || len(b) != 4096 || n > 64<<10 {
		t.Fatalf("4 KiB of a 200 MiB file: %d bytes, %v, %d bytes allocated", len(b), err, n)
	}
	if b, err = folder.ReadPrefix("dataloader/short.json", 4096); err != nil || string(b) != `{"step":3}` {
		t.Fatalf("a 10-byte file: %q, %v", b, err)
	}
	_, err = folder.ReadPrefix("dataloader/fifo.json", 4096)
	if fe := (*FileError)(nil); !errors.As(err, &fe) || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("a FIFO: %v, want a FileError", err)
	}
	folder.daemonUID = 0 // as a daemon run as root, which could read anything
	_, err = folder.For(stranger()).ReadPrefix("dataloader/short.json", 4096)
	if ae := (*AccessError)(nil); !errors.As(err, &ae) || ae.At != filepath.Join(dir, "short.json") {
		t.Fatalf("another user's 0600 file: %v, want an AccessError naming it", err)
	}
}
