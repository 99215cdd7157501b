package session

import (
	"time"

	"golang.org/x/sys/unix"
)

// lifeline follows the process of a consumer's batch stream, so that when
// the stream ends without a close the daemon can tell a process that died
// (its session is kept for a new one: keep.go) from one that ended the
// stream and lives on (a loader that timed out: its session goes, as
// before). It holds a pidfd, taken while the stream is live, so the process
// it names cannot be another that reused the pid.
type lifeline struct {
	fd int // -1: the process cannot be followed
}

// deathGrace is how long a stream's end waits to see its process exit: the
// kernel closes a dying process's socket (the stream's end) just before it
// marks the process exited.
const deathGrace = 2 * time.Second

// followProcess is a lifeline of process pid; pid 0 (not known: another pid
// namespace) or a kernel without pidfd_open (before 5.3) gives one that
// cannot tell.
func followProcess(pid int32) *lifeline {
	if pid <= 0 {
		return &lifeline{fd: -1}
	}
	fd, err := unix.PidfdOpen(int(pid), 0)
	if err != nil {
		return &lifeline{fd: -1}
	}
	return &lifeline{fd: fd}
}

// lives reports whether the process still runs after waiting up to grace
// for it to exit, looking at stop (the daemon stopping) as it waits. A
// process it cannot follow counts as gone: its stream ended without a
// close, as a dead process's does.
func (l *lifeline) lives(grace time.Duration, stop func() bool) bool {
	if l == nil || l.fd < 0 {
		return false
	}
	deadline := time.Now().Add(grace)
	for {
		fds := []unix.PollFd{{Fd: int32(l.fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 20)
		switch {
		case err == unix.EINTR:
		case err != nil:
			return false
		case n > 0:
			return false // readable: the process exited
		}
		if stop() || time.Now().After(deadline) {
			return true
		}
	}
}

// exited reports whether the process is known to have exited, now.
func (l *lifeline) exited() bool {
	if l == nil || l.fd < 0 {
		return false
	}
	fds := []unix.PollFd{{Fd: int32(l.fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0
}

// close lets go of the pidfd. Idempotent.
func (l *lifeline) close() {
	if l != nil && l.fd >= 0 {
		_ = unix.Close(l.fd)
		l.fd = -1
	}
}
