package main

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// exitWithParent makes the daemon stop as on SIGTERM when its parent,
// process ppid, exits, however it exits: a launcher killed by SIGKILL has no
// chance to stop the daemon itself, which would otherwise hold its socket,
// rings and metrics port until someone finds it. The kernel sends the
// signal (PR_SET_PDEATHSIG). A parent that exited before the call would
// never trigger it, so the daemon checks its parent is still ppid after the
// call (ppid comes from the launcher, which knows its own PID from before it
// started the daemon) and refuses to start otherwise.
func exitWithParent(ppid int) error {
	if got := os.Getppid(); got != ppid {
		return fmt.Errorf("exit_with_parent %d: the daemon's parent is process %d (process %d has exited, or is not the parent)", ppid, got, ppid)
	}
	// The setting is kept by the calling thread, and lost if that thread
	// ends; the runtime ends a thread only when a goroutine locked to it
	// returns. Locked for good, this thread serves no other goroutine.
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGTERM), 0, 0, 0); err != nil {
		return fmt.Errorf("exit_with_parent: prctl(PR_SET_PDEATHSIG): %w", err)
	}
	if got := os.Getppid(); got != ppid {
		return fmt.Errorf("exit_with_parent %d: the parent exited while the daemon started", ppid)
	}
	return nil
}
