package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ErrSocketPath marks a socket path that cannot be listened on.
var ErrSocketPath = errors.New("bad socket path")

// MaxSocketPath is the longest unix socket path Linux accepts (sun_path is
// 108 bytes, one of them the terminating NUL).
const MaxSocketPath = 107

// SocketPath accepts "unix:///path", "unix:path" and bare paths and returns
// the path, checked for length.
func SocketPath(addr string) (string, error) {
	p := strings.TrimPrefix(strings.TrimPrefix(addr, "unix://"), "unix:")
	if p == "" {
		return "", fmt.Errorf("%w: socket path is empty", ErrSocketPath)
	}
	if len(p) > MaxSocketPath {
		return "", fmt.Errorf("%w: socket path %q is %d bytes, longer than the %d a unix socket allows; choose a shorter path",
			ErrSocketPath, p, len(p), MaxSocketPath)
	}
	return p, nil
}

// Listen creates the socket's parent directory, removes a stale socket (one
// that nothing answers on), listens, and sets mode 0660. The returned
// function closes the listener and removes the socket.
func Listen(addr string) (net.Listener, func(), error) {
	path, err := SocketPath(addr)
	if err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, nil, fmt.Errorf("socket directory: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, nil, fmt.Errorf("%s exists and is not a socket; refusing to replace it", path)
		}
		d := net.Dialer{Timeout: time.Second}
		conn, err := d.DialContext(context.Background(), "unix", path)
		if err == nil {
			conn.Close()
			return nil, nil, fmt.Errorf("%s: another daemon is serving on this socket", path)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ENOENT) {
			return nil, nil, fmt.Errorf("%s: cannot tell whether the socket is stale: %w", path, err)
		}
		if err := os.Remove(path); err != nil {
			return nil, nil, fmt.Errorf("removing stale socket: %w", err)
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, nil, err
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(path, 0o660); err != nil {
		l.Close()
		os.Remove(path)
		return nil, nil, err
	}
	cleanup := func() {
		l.Close()
		os.Remove(path)
	}
	return l, cleanup, nil
}
