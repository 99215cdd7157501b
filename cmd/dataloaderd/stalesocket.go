package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"time"
)

// fileID tells a file apart from a later one created at the same path.
type fileID struct{ dev, ino uint64 }

// socketFile returns the identity of the unix socket file at path, and
// false when there is none (no file, or a file of another kind).
func socketFile(path string) (fileID, bool) {
	info, err := os.Lstat(path)
	if err != nil || info.Mode().Type() != fs.ModeSocket {
		return fileID{}, false
	}
	st := info.Sys().(*syscall.Stat_t)
	return fileID{dev: uint64(st.Dev), ino: st.Ino}, true
}

// dead says whether nothing listens on the unix socket at path: a connect
// refused. A connect that succeeds is a live daemon; any other failure
// (no permission, a full backlog) proves nothing, and is returned.
func dead(path string) (bool, error) {
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		conn.Close()
		return false, nil
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true, nil
	}
	return false, fmt.Errorf("socket %s: %w", path, err)
}

// removeDeadSocket removes the socket at path if it is still the file id
// and nothing listens on it; it reports whether it did. A daemon stopped
// by SIGKILL cannot remove its socket itself.
func removeDeadSocket(path string, id fileID) (bool, error) {
	if now, ok := socketFile(path); !ok || now != id {
		return false, nil // gone, or another daemon's since
	}
	if isDead, err := dead(path); !isDead {
		return false, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("remove the dead socket %s: %w", path, err)
	}
	return true, nil
}

// wrapperSocket is the wrapper's default socket name, per wrapper PID.
var wrapperSocket = regexp.MustCompile(`^dataloaderd-([0-9]+)\.sock$`)

// sweepSockets removes from dir the default sockets of wrappers that are
// gone (dataloaderd-PID.sock, left by a daemon killed with its wrapper),
// and returns their names. One is removed only when all of this holds: it
// is a socket of this user, nothing listens on it, and then no process has
// its PID, so no wrapper alive can own it (a wrapper's PID is alive before
// its daemon binds the socket). A PID reused since is a file left for a
// later sweep.
func sweepSockets(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("sweep %s: %w", dir, err)
	}
	var removed []string
	for _, e := range entries {
		m := wrapperSocket.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		path := filepath.Join(dir, e.Name())
		info, err := os.Lstat(path)
		if err != nil || info.Mode().Type() != fs.ModeSocket || info.Sys().(*syscall.Stat_t).Uid != uint32(os.Getuid()) {
			continue
		}
		if isDead, _ := dead(path); !isDead {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			continue
		}
		if err := os.Remove(path); err == nil {
			removed = append(removed, e.Name())
		}
	}
	return removed, nil
}
