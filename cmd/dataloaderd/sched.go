package main

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// batchScheduling puts every thread of the daemon in the SCHED_BATCH class.
// The daemon is a throughput worker beside the training processes: when a
// trainer's slot release wakes the producer, a normal thread preempts the
// trainer on its core, which shows in the trainer's wait in next() on a
// machine with few cores (docs/benchmarks.md has the figures); a batch
// thread waits for the core's next turn instead.
// Threads inherit the class from the thread that creates them, so setting
// every thread there is now (twice, for those created meanwhile) covers the
// ones the Go runtime makes later.
func batchScheduling() error {
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_BATCH}
	for pass := 0; pass < 2; pass++ {
		entries, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("batch scheduling: %w", err)
		}
		for _, e := range entries {
			tid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if err := unix.SchedSetAttr(tid, &attr, 0); err != nil && err != unix.ESRCH {
				return fmt.Errorf("batch scheduling of thread %d: %w", tid, err)
			}
		}
	}
	return nil
}
