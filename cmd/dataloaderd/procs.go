package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// process is one process told apart from any later one that reuses its
// PID: by its start time (clock ticks after boot, /proc/PID/stat field 22).
type process struct {
	pid   int
	start uint64
}

// procStat is what watch reads of /proc/PID/stat: the state letter, the
// parent's PID and the start time.
type procStat struct {
	state byte
	ppid  int
	start uint64
}

// readStat reads /proc/PID/stat under root (normally /proc). The command
// name may hold spaces and parentheses, so the fields are counted from the
// last ')'.
func readStat(root string, pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("%s/%d/stat", root, pid))
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("%s/%d/stat: no ')' in %q", root, pid, b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("%s/%d/stat: %d fields after the command, want at least 20", root, pid, len(f))
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return procStat{}, fmt.Errorf("%s/%d/stat: parent PID %q: %w", root, pid, f[1], err)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("%s/%d/stat: start time %q: %w", root, pid, f[19], err)
	}
	return procStat{state: f[0][0], ppid: ppid, start: start}, nil
}

// dead says whether a state letter is a process that has exited: a zombie
// (Z) that nobody has reaped yet, or one being reaped (X).
func (s procStat) dead() bool { return s.state == 'Z' || s.state == 'X' }

// alive says whether p is still running: its PID is there, not a zombie,
// and started when p did (not a new process on a reused PID).
func (p process) alive() bool {
	st, err := readStat("/proc", p.pid)
	return err == nil && !st.dead() && st.start == p.start
}

// lookup returns the running process pid is now, if any.
func lookup(pid int) (process, bool) {
	st, err := readStat("/proc", pid)
	if err != nil || st.dead() {
		return process{}, false
	}
	return process{pid: pid, start: st.start}, true
}

// hasEnv says whether environ (NUL-separated NAME=value entries, as in
// /proc/PID/environ) holds the entry want exactly.
func hasEnv(environ []byte, want string) bool {
	for _, e := range bytes.Split(environ, []byte{0}) {
		if string(e) == want {
			return true
		}
	}
	return false
}

// jobProcesses lists the running processes of this user whose environment
// holds the entry mark (NAME=token), all but those in skip. A process of
// another user, or one whose environment cannot be read, is not listed.
func jobProcesses(mark string, skip func(process) bool) []process {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	uid := uint32(os.Getuid())
	var found []process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		if info, err := os.Stat("/proc/" + e.Name()); err != nil || info.Sys().(*syscall.Stat_t).Uid != uid {
			continue
		}
		p, ok := lookup(pid)
		if !ok || skip(p) {
			continue
		}
		environ, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !hasEnv(environ, mark) {
			continue
		}
		found = append(found, p)
	}
	return found
}

// signal sends sig to p and to no other process: through a pidfd where the
// kernel allows one (Linux 5.3+), opened before p's start time is checked
// again, so that a PID reused in between cannot receive it; with kill(2)
// otherwise (an older kernel, or a seccomp filter refusing pidfd_open),
// just after the same check. A p that has exited is no error.
func (p process) signal(sig unix.Signal) error {
	fd, err := unix.PidfdOpen(p.pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	pidfd := err == nil
	if pidfd {
		defer unix.Close(fd)
	}
	if !p.alive() {
		return nil
	}
	if pidfd {
		err = unix.PidfdSendSignal(fd, sig, nil, 0)
	} else {
		err = unix.Kill(p.pid, sig)
	}
	if err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal %v to process %d: %w", sig, p.pid, err)
	}
	return nil
}

// job is what the watcher stops once the wrapper is gone: the processes
// marked with the wrapper's token (torchrun, the ranks and whatever they
// started), then the daemon, each given grace between SIGTERM and SIGKILL.
type job struct {
	mark   string  // NAME=token
	self   int     // the watcher, which carries the mark too
	daemon process // zero when not known or gone at start
	grace  time.Duration
}

// stop stops the job's processes, then the daemon last, as the wrapper
// would have (the ranks do not see the daemon go under them), and says
// what it stopped.
func (j job) stop() ([]string, error) {
	var did []string
	var errs []error
	others := func() []process {
		return jobProcesses(j.mark, func(p process) bool { return p.pid == j.self || p == j.daemon })
	}
	n, left := terminate(others, j.grace)
	if n > 0 {
		did = append(did, fmt.Sprintf("%d processes of its job", n))
	}
	if len(left) > 0 {
		errs = append(errs, fmt.Errorf("processes %v of the job still run after SIGKILL", left))
	}
	if j.daemon.pid > 0 {
		daemon := func() []process {
			if j.daemon.alive() {
				return []process{j.daemon}
			}
			return nil
		}
		if n, left := terminate(daemon, j.grace); n > 0 && len(left) == 0 {
			did = append(did, fmt.Sprintf("the daemon (process %d)", j.daemon.pid))
		} else if len(left) > 0 {
			errs = append(errs, fmt.Errorf("the daemon (process %d) still runs after SIGKILL", j.daemon.pid))
		}
	}
	return did, errors.Join(errs...)
}

// killWait is how long terminate waits for processes to go after SIGKILL
// (one in uninterruptible sleep goes when its I/O ends).
const killWait = 3 * time.Second

// terminate sends SIGTERM (and SIGCONT, for a stopped one) to each process
// find lists, again to those that appear later, and SIGKILL to those left
// after grace, until find lists none. It returns how many it signalled, and
// those still running killWait after SIGKILL.
func terminate(find func() []process, grace time.Duration) (int, []process) {
	killAt := time.Now().Add(grace)
	termed := map[process]bool{}
	for {
		procs := find()
		now := time.Now()
		if len(procs) == 0 || now.After(killAt.Add(killWait)) {
			return len(termed), procs
		}
		for _, p := range procs {
			switch {
			case now.After(killAt):
				_ = p.signal(unix.SIGKILL)
			case !termed[p]:
				_ = p.signal(unix.SIGTERM)
				_ = p.signal(unix.SIGCONT)
			}
			termed[p] = true
		}
		time.Sleep(50 * time.Millisecond)
	}
}
