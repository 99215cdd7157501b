package ring_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/ring"
)

// touch creates dir/name.
func touch(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// TestSweepDead: a new claim removes the rings, control files and lock of
// an instance whose lock nobody holds, and leaves a live instance's files,
// its own, and every name that is not an instance's.
func TestSweepDead(t *testing.T) {
	dir := t.TempDir()
	live, err := ring.ClaimDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Release()
	liveRing := ring.FileName(live.Instance(), "aaaaaaaaaaaaaaaaaaaaaaaa")
	touch(t, dir, liveRing)
	touch(t, dir, liveRing+".ctl")

	// A dead daemon: its lock file is there, nobody holds it.
	const dead = "0123456789abcdef"
	deadFiles := []string{"dataloaderd-" + dead + ".lock", ring.FileName(dead, "bbbbbbbbbbbbbbbbbbbbbbbb"),
		ring.FileName(dead, "cccccccccccccccccccccccc") + ".ctl"}
	for _, n := range deadFiles {
		touch(t, dir, n)
	}
	// Not an instance's: an older daemon's ring, an instance with no lock
	// file (nothing says it is dead), another program's files.
	others := []string{"dataloaderd-dddddddddddddddddddddddd", "dataloaderd-dddddddddddddddddddddddd.ctl",
		ring.FileName("fedcba9876543210", "eeeeeeeeeeeeeeeeeeeeeeee"), "dataloaderd-0123456789ABCDEF.lock",
		"dataloaderd-0123.lock", "other-file"}
	for _, n := range others {
		touch(t, dir, n)
	}

	c, err := ring.ClaimDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	own := ring.FileName(c.Instance(), "ffffffffffffffffffffffff")
	touch(t, dir, own)
	removed, err := c.SweepDead()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, n := range deadFiles {
		want = append(want, filepath.Join(dir, n))
	}
	slices.Sort(removed)
	slices.Sort(want)
	if !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	left := names(t, dir)
	for _, n := range append(others, liveRing, liveRing+".ctl", filepath.Base(live.LockPath()), own, filepath.Base(c.LockPath())) {
		if !slices.Contains(left, n) {
			t.Errorf("%s was removed", n)
		}
	}

	// Release removes the claim's own files and lock, nothing else.
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}
	left = names(t, dir)
	for _, n := range left {
		if strings.HasPrefix(n, "dataloaderd-"+c.Instance()) {
			t.Errorf("%s left after Release", n)
		}
	}
	if len(left) != len(others)+3 {
		t.Errorf("after Release: %v", left)
	}
}

// TestSweepKilledProcess: the lock of a process that was killed is free.
// A child process (this test binary) claims the directory, makes a ring
// and is killed by SIGKILL; a claim made afterwards removes what it left.
func TestSweepKilledProcess(t *testing.T) {
	if dir := os.Getenv("RING_CLAIM_CHILD"); dir != "" {
		c, err := ring.ClaimDir(dir)
		if err != nil {
			os.Exit(3)
		}
		if _, err := ring.NewShmRing(dir, ring.FileName(c.Instance(), "ring"), 2, 4096, 1); err != nil {
			os.Exit(4)
		}
		os.Stdout.WriteString("ready\n")
		time.Sleep(time.Hour) // until killed
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSweepKilledProcess$")
	cmd.Env = append(os.Environ(), "RING_CLAIM_CHILD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := out.Read(buf); err != nil || string(buf) != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child did not claim the directory: %q %v", buf, err)
	}
	if left := names(t, dir); len(left) != 2 {
		t.Fatalf("the child made %v, want a lock file and a ring", left)
	}
	// Alive, the child's files are not swept.
	c, err := ring.ClaimDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if removed, err := c.SweepDead(); err != nil || len(removed) != 0 {
		t.Fatalf("swept a live instance: %v %v", removed, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	removed, err := c.SweepDead()
	if err != nil || len(removed) != 2 {
		t.Fatalf("after SIGKILL: removed %v, %v; want the ring and the lock file", removed, err)
	}
	if left := names(t, dir); len(left) != 1 || left[0] != filepath.Base(c.LockPath()) {
		t.Fatalf("left %v, want only the new claim's lock", left)
	}
}

// TestSweepRefusesOddLockFiles: a name like a dead instance's lock file that
// is a FIFO, a symbolic link, or another user's file is not a daemon's lock:
// the sweep neither blocks on it (opening a FIFO for reading waits for a
// writer) nor removes it or the files named after its instance, and the
// sweep still removes a real dead instance's files beside them.
func TestSweepRefusesOddLockFiles(t *testing.T) {
	dir := t.TempDir()
	const fifo, link, foreign, dead = "0000000000000001", "0000000000000002", "0000000000000003", "0000000000000004"
	if err := syscall.Mkfifo(filepath.Join(dir, "dataloaderd-"+fifo+".lock"), 0o600); err != nil {
		t.Fatal(err)
	}
	touch(t, dir, ring.FileName(fifo, "ring"))
	target := filepath.Join(t.TempDir(), "elsewhere")
	touch(t, filepath.Dir(target), "elsewhere")
	if err := os.Symlink(target, filepath.Join(dir, "dataloaderd-"+link+".lock")); err != nil {
		t.Fatal(err)
	}
	touch(t, dir, ring.FileName(link, "ring"))
	touch(t, dir, "dataloaderd-"+dead+".lock")
	touch(t, dir, ring.FileName(dead, "ring"))

	c, err := ring.ClaimDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	type result struct {
		removed []string
		err     error
	}
	done := make(chan result, 1)
	go func() {
		removed, err := c.SweepDead()
		done <- result{removed, err}
	}()
	var got result
	select {
	case got = <-done:
	case <-time.After(time.Minute): // a hang, not a speed limit: a blocked open never returns
		t.Fatal("SweepDead blocked on a FIFO named like a lock file")
	}
	if got.err != nil {
		t.Fatalf("sweep: %v", got.err)
	}
	slices.Sort(got.removed)
	want := []string{filepath.Join(dir, "dataloaderd-"+dead+".lock"), filepath.Join(dir, ring.FileName(dead, "ring"))}
	slices.Sort(want)
	if !slices.Equal(got.removed, want) {
		t.Fatalf("removed %v, want only the dead instance's %v", got.removed, want)
	}
	for _, n := range []string{"dataloaderd-" + fifo + ".lock", ring.FileName(fifo, "ring"), "dataloaderd-" + link + ".lock", ring.FileName(link, "ring")} {
		if _, err := os.Lstat(filepath.Join(dir, n)); err != nil {
			t.Errorf("%s was removed: %v", n, err)
		}
	}
	if _, err := os.Stat(target); err != nil {
		t.Errorf("the link's target was touched: %v", err)
	}

	// Another user's lock file and files: the sweep leaves them.
	touch(t, dir, "dataloaderd-"+foreign+".lock")
	touch(t, dir, ring.FileName(foreign, "ring"))
	restore := ring.PretendOwner(uint32(os.Geteuid()) + 1)
	removed, err := c.SweepDead()
	restore()
	if err != nil || len(removed) != 0 {
		t.Fatalf("swept another user's files: %v %v", removed, err)
	}
}
