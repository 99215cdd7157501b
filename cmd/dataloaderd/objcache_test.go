package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestServeCacheDirInUse: a daemon whose --object-cache-dir another holds
// refuses to start, naming the directory and the flag (it does not run on
// with object storage off).
func TestServeCacheDirInUse(t *testing.T) {
	dir := t.TempDir()
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	args := []string{"serve", "--socket", filepath.Join(t.TempDir(), "s"), "--shm-dir", t.TempDir(), "--log-level", "warn",
		"--object-cache-dir", dir}
	// A daemon that ran on would serve until stopped: stopped here after 10 s.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if c := run(ctx, args, &bytes.Buffer{}, &stderr); c == 0 ||
		!strings.Contains(stderr.String(), dir) || !strings.Contains(stderr.String(), "--object-cache-dir") {
		t.Fatalf("a daemon on a cache dir in use: exit %d, stderr %q", c, stderr.String())
	}
}
