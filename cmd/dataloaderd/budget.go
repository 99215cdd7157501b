package main

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// ringBudget is the host memory all sessions' rings may hold together, in
// bytes: mb when set, else half of the smaller of the machine's RAM and the
// shm directory's filesystem (the rings of the shm transport live there, and
// a full tmpfs fails writes with SIGBUS; inline rings live in the daemon).
// The half leaves the rest to the trainers' own shared memory (PyTorch's
// DataLoader workers, NCCL) and to the page cache of the corpus.
func ringBudget(mb int, shmDir string) (int64, string, error) {
	if mb < 0 {
		return 0, "", fmt.Errorf("ring_budget_mb must be >= 0 (0: derived from RAM and the shm directory), got %d", mb)
	}
	if mb > 0 {
		return int64(mb) << 20, "--ring-budget-mb", nil
	}
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0, "", fmt.Errorf("ring budget: sysinfo: %w", err)
	}
	ram := int64(si.Totalram) * int64(si.Unit)
	from, limit := "half of RAM", ram
	var st unix.Statfs_t
	if err := unix.Statfs(shmDir, &st); err == nil {
		if fsBytes := int64(st.Blocks) * st.Bsize; fsBytes > 0 && fsBytes < limit {
			from, limit = "half of the shm directory's filesystem", fsBytes
		}
	}
	return limit / 2, from, nil
}
