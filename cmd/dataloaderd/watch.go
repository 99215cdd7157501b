package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// tokenVar is the environment variable by which the wrapper marks the
// processes of its job: it exports a random token before it starts
// anything, and torchrun and the ranks inherit it.
const tokenVar = "DATALOADERD_WRAPPER_TOKEN"

const watchUsage = `dataloaderd watch: the lifeline of deploy/torchrun-with-dataloaderd.sh.

Usage:
  dataloaderd watch --pid PID --token T [--daemon PID] [--socket S] [--sweep DIR] [--grace 5s]

Started by the wrapper (process PID), it moves into a session of its own and
watches it. When the wrapper is gone, however it died, it stops every process
of this user whose environment holds ` + tokenVar + `=T (SIGTERM, then SIGKILL
after the grace), then the daemon, and removes the socket if nothing answers
on it. SIGTERM stops the watcher and nothing else: the wrapper's normal exit.

Flags:
`

// watchSettings are the watch subcommand's flags.
type watchSettings struct {
	parent, daemon int
	token          string
	socket, sweep  string
	grace          time.Duration
}

var tokenPattern = regexp.MustCompile(`^[A-Za-z0-9-]{16,128}$`)

func parseWatch(args []string, stderr io.Writer) (watchSettings, error) {
	var s watchSettings
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	fs.IntVar(&s.parent, "pid", 0, "the wrapper's PID, which must be the watcher's parent")
	fs.StringVar(&s.token, "token", "", "the job's mark: its processes' environment holds "+tokenVar+"=TOKEN (16 to 128 letters, digits or '-')")
	fs.IntVar(&s.daemon, "daemon", 0, "the daemon's PID: stopped after the job's other processes")
	fs.StringVar(&s.socket, "socket", "", "the daemon's socket: removed once nothing answers on it")
	fs.StringVar(&s.sweep, "sweep", "", "a directory whose wrapper sockets (dataloaderd-PID.sock) of gone wrappers are removed at start")
	fs.DurationVar(&s.grace, "grace", 5*time.Second, "how long the job's processes have between SIGTERM and SIGKILL")
	if err := parseFlags(fs, watchUsage, args, stderr); err != nil {
		return s, err
	}
	if err := noArgs(fs); err != nil {
		return s, err
	}
	switch {
	case s.parent <= 0:
		return s, fmt.Errorf("watch: --pid %d: want the wrapper's PID", s.parent)
	case !tokenPattern.MatchString(s.token):
		return s, fmt.Errorf("watch: --token %q: want 16 to 128 letters, digits or '-'", s.token)
	case s.grace <= 0:
		return s, fmt.Errorf("watch: --grace %v: want a positive duration", s.grace)
	}
	return s, nil
}

// watchCmd is `dataloaderd watch`. It notes what it watches while the
// wrapper is still its parent, sweeps the sockets of gone wrappers, then
// calls setsid, last: the wrapper waits for the watcher to lead a session
// before it starts torchrun, so a kill of the wrapper's session never finds
// the watcher still in it. Then it polls the wrapper until the wrapper is
// gone (stop the job) or a SIGTERM comes (the wrapper's normal exit).
func watchCmd(ctx context.Context, args []string, stderr io.Writer) error {
	s, err := parseWatch(args, stderr)
	if err != nil {
		return err
	}
	// A terminal's hangup or Ctrl-C is the wrapper's to act on; and the
	// watcher's stderr may be a pipe its reader left: a write must fail,
	// not kill it mid-stop.
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGPIPE)
	wrapper, ok := parentProcess(s.parent)
	var daemon process
	if s.daemon > 0 {
		daemon, _ = lookup(s.daemon)
	}
	var sock fileID
	var hasSock bool
	if s.socket != "" {
		sock, hasSock = socketFile(s.socket)
	}
	if s.sweep != "" {
		if removed, err := sweepSockets(s.sweep); err != nil {
			fmt.Fprintln(stderr, "dataloaderd watch:", err)
		} else if len(removed) > 0 {
			fmt.Fprintf(stderr, "dataloaderd watch: removed the sockets of gone wrappers in %s: %s\n", s.sweep, strings.Join(removed, " "))
		}
	}
	if _, err := unix.Setsid(); err != nil {
		return fmt.Errorf("watch: setsid: %w", err)
	}
	if ok && !waitGone(ctx, wrapper) {
		return nil // stopped: the wrapper's normal exit
	}
	j := job{mark: tokenVar + "=" + s.token, self: os.Getpid(), daemon: daemon, grace: s.grace}
	stopped, err := j.stop()
	if hasSock {
		if removed, rerr := removeDeadSocket(s.socket, sock); rerr != nil {
			err = errors.Join(err, rerr)
		} else if removed {
			stopped = append(stopped, "the socket "+s.socket)
		}
	}
	if len(stopped) > 0 {
		fmt.Fprintf(stderr, "dataloaderd watch: the wrapper (process %d) is gone; stopped %s\n", s.parent, strings.Join(stopped, ", "))
	}
	return err
}

// parentProcess returns the wrapper, process pid, if it is still this
// process's parent; false if it has gone already.
func parentProcess(pid int) (process, bool) {
	if os.Getppid() != pid {
		return process{}, false
	}
	p, ok := lookup(pid)
	// Read after the check: the parent still ours means the start time
	// read is the wrapper's, not a later process's on its PID.
	if !ok || os.Getppid() != pid {
		return process{}, false
	}
	return p, true
}

// watchPoll is how often the watcher looks at the wrapper.
const watchPoll = 100 * time.Millisecond

// waitGone returns true once p has exited (or its PID is another
// process's), false when ctx ends first.
func waitGone(ctx context.Context, p process) bool {
	t := time.NewTicker(watchPoll)
	defer t.Stop()
	for p.alive() {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}
