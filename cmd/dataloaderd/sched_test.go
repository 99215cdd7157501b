package main

import (
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// TestBatchScheduling: every thread of the process is SCHED_BATCH after
// batchScheduling, and so is a thread the runtime starts afterwards.
func TestBatchScheduling(t *testing.T) {
	if err := batchScheduling(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	for i := 0; i < 8; i++ { // blocked goroutines make the runtime start threads
		go func() { <-done }()
	}
	close(done)
	entries, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		tid, _ := strconv.Atoi(e.Name())
		attr, err := unix.SchedGetAttr(tid, 0)
		if err != nil {
			continue // the thread exited
		}
		if attr.Policy != unix.SCHED_BATCH {
			t.Errorf("thread %d has policy %d, want SCHED_BATCH (%d)", tid, attr.Policy, unix.SCHED_BATCH)
		}
	}
}
