package main

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/dataloaderd/dataloaderd/internal/memlimit"
	"github.com/dataloaderd/dataloaderd/internal/objstore"
)

// Defaults of the memory settings that fitMemory may lower to the limit.
const (
	defaultTokenCacheMB    = 1024
	defaultMemoryReserveMB = 256
)

// ringBudget is the host memory all sessions' rings may hold together, in
// bytes: mb when set, else half of the smallest of the machine's RAM, the
// shm directory's filesystem and the memory limit (limit, 0: none). The
// rings of the shm transport live in that filesystem (a full tmpfs fails
// writes with SIGBUS) and are charged to the daemon's memory cgroup, as
// inline rings, in the daemon, are. The half leaves the rest to the
// trainers' own shared memory (PyTorch's DataLoader workers, NCCL) and to
// the page cache of the corpus.
func ringBudget(mb int, shmDir string, limit int64) (int64, string, error) {
	if mb > 0 {
		return int64(mb) << 20, "--ring-budget-mb", nil
	}
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0, "", fmt.Errorf("ring budget: sysinfo: %w", err)
	}
	ram := int64(si.Totalram) * int64(si.Unit)
	from, bound := "half of RAM", ram
	var st unix.Statfs_t
	if err := unix.Statfs(shmDir, &st); err == nil {
		if fsBytes := int64(st.Blocks) * st.Bsize; fsBytes > 0 && fsBytes < bound {
			from, bound = "half of the shm directory's filesystem", fsBytes
		}
	}
	if limit > 0 && limit < bound {
		from, bound = "half of the memory limit", limit
	}
	return bound / 2, from, nil
}

// memoryBudgets are the daemon's budgets of host memory, fitted to its
// memory limit.
type memoryBudgets struct {
	limit memlimit.Limit
	// ring, tokenCache and objectCache are the budgets in bytes. The
	// object cache counts only without --object-cache-dir: in a directory
	// its blocks are in the page cache, which the kernel reclaims before it
	// kills.
	ring, tokenCache, objectCache, reserve int64
	// ringFrom says where the ring budget came from, for the log.
	ringFrom string
	// lowered holds a line for each default fitMemory lowered.
	lowered []string
}

// fitMemory fits the ring budget, the token cache, the memory of the object
// cache and the daemon's reserve within limit (see memlimit.Fit): settings
// changed from their defaults must fit or the daemon refuses to start,
// naming them and the limit; settings left at their defaults are lowered to
// fit. cfg is checked (daemonConfig.check): no budget is negative.
func fitMemory(cfg daemonConfig, limit memlimit.Limit) (memoryBudgets, error) {
	mb := memoryBudgets{limit: limit, reserve: int64(cfg.MemoryReserveMB) << 20, objectCache: int64(cfg.ObjectCacheMB) << 20}
	ring, from, err := ringBudget(cfg.RingBudgetMB, cfg.ShmDir, limit.Bytes)
	if err != nil {
		return mb, err
	}
	mb.ringFrom = from
	// Under a limit, the caches' defaults are shares of it too (an eighth
	// and a quarter, at most their defaults); then whatever was left at
	// its default shares what the limit leaves.
	token, tokenDefault := int64(cfg.TokenCacheMB)<<20, cfg.TokenCacheMB == defaultTokenCacheMB
	object, objectDefault := int64(cfg.ObjectCacheMB)<<20, int64(cfg.ObjectCacheMB) == objstore.DefaultMemoryBytes>>20
	if limit.Bytes > 0 {
		if tokenDefault {
			token = min(token, limit.Bytes/8&^(1<<20-1))
		}
		if objectDefault {
			object = min(object, limit.Bytes/4&^(1<<20-1))
		}
	}
	budgets := []memlimit.Budget{
		{Flag: "--ring-budget-mb", Bytes: ring, Default: cfg.RingBudgetMB == 0, Min: 16 << 20},
		{Flag: "--token-cache-mb", Bytes: token, Default: tokenDefault, Min: 16 << 20},
	}
	if !objectsAllowed(cfg.AllowRoots) {
		mb.objectCache = 0 // no s3:// dataset can be opened: no store, no cache
	} else if cfg.ObjectCacheDir == "" {
		budgets = append(budgets, memlimit.Budget{Flag: "--object-cache-mb", Bytes: object, Default: objectDefault, Min: 16 << 20})
	}
	fitted, lowered, err := memlimit.Fit(limit, mb.reserve, "--memory-reserve-mb", budgets)
	if err != nil {
		return mb, err
	}
	mb.ring, mb.tokenCache, mb.lowered = fitted[0].Bytes, fitted[1].Bytes, lowered
	if len(fitted) > 2 {
		mb.objectCache = fitted[2].Bytes
	}
	return mb, nil
}

// fitToLimit reads the daemon's memory limit and fits its budgets to it
// (fitMemory), logging the limit, the budgets and each default lowered. A
// limit that cannot be read is logged, and the budgets are used as set.
func fitToLimit(cfg daemonConfig, log *zap.Logger) (memoryBudgets, error) {
	limit, err := memlimit.Read("/")
	if err != nil {
		log.Warn("memory limit unknown: budgets are not checked against it", zap.Error(err))
		limit = memlimit.Limit{}
	}
	mb, err := fitMemory(cfg, limit)
	if err != nil {
		return mb, err
	}
	for _, l := range mb.lowered {
		log.Warn(l)
	}
	log.Info("memory budgets", zap.Int64("limit_mib", limit.Bytes>>20), zap.String("limit_file", limit.File),
		zap.Int64("ring_mib", mb.ring>>20), zap.String("ring_from", mb.ringFrom), zap.Int64("token_cache_mib", mb.tokenCache>>20),
		zap.Int64("object_cache_mib", mb.objectCache>>20), zap.Int64("reserve_mib", mb.reserve>>20))
	return mb, nil
}

// goLimit is the Go runtime's soft memory limit under a cgroup's limit:
// the limit less the memory the daemon's cgroup is charged for that the Go
// heap does not include (the object cache's memory, a memfd per object; the
// rings outside the heap), and never below floor. Without it the collector
// lets garbage grow as large as the live heap (GOGC=100): with inline rings
// and the token cache live, past the limit.
func goLimit(limit, objectCache, outsideHeap, floor int64) int64 {
	return max(limit-objectCache-outsideHeap, floor)
}

// keepGoLimit sets the Go runtime's soft memory limit (goLimit) now and
// each second after, as rings outside the heap come and go, until ctx
// ends, and then puts back the limit it found. Without a memory limit it
// sets nothing.
func (mb memoryBudgets) keepGoLimit(ctx context.Context, outsideHeap func() int64) error {
	if mb.limit.Bytes <= 0 {
		return nil
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	before := debug.SetMemoryLimit(-1) // -1 reads it
	defer debug.SetMemoryLimit(before)
	for {
		debug.SetMemoryLimit(goLimit(mb.limit.Bytes, mb.objectCache, outsideHeap(), mb.reserve))
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// objectsAllowed says whether jobs may name s3:// datasets: with no
// --allow-root every path may be named; otherwise only under an s3:// root.
// A daemon that allows none has no object store, and its cache no budget.
func objectsAllowed(roots []string) bool {
	if len(roots) == 0 {
		return true
	}
	for _, r := range roots {
		if strings.HasPrefix(r, "s3://") {
			return true
		}
	}
	return false
}
