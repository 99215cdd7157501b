package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"

	"github.com/dataloaderd/dataloaderd/internal/cuda"
	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/session"
)

// settings is every daemon setting, in the order of the README's table
// (TestReadmeDaemonFlags writes it from these rows) and of the checks. A
// new setting is a field of daemonConfig and a row in one of these groups.
func settings() []setting {
	return append(append(sessionSettings(), processSettings()...), objectSettings()...)
}

// sessionSettings are the socket's, the sessions' and their memory's.
func sessionSettings() []setting {
	return []setting{
		{key: "socket", flag: "socket", value: stringValue{get: func(c *daemonConfig) *string { return &c.Socket }, def: defaultSocket()},
			help:       "unix socket to serve on (unix:///path or a path; default {})",
			docDefault: "`$DATALOADERD_SOCKET`, else `$XDG_RUNTIME_DIR/dataloaderd/dataloaderd.sock`, else `/run/dataloaderd/dataloaderd.sock`",
			doc:        "Unix socket (path or `unix:///path`, at most 107 bytes), mode 0660. A stale socket is replaced, a live one refused."},
		{key: "metrics_addr", flag: "metrics-addr", value: stringValue{get: func(c *daemonConfig) *string { return &c.MetricsAddr }},
			help: "HOST:PORT to serve Prometheus /metrics on (default: off)", docDefault: "off",
			doc: "`HOST:PORT` for Prometheus `/metrics` (see `docs/metrics.md`); a host that is not loopback (`:9400` is every interface) is logged as a warning."},
		{key: "allow_roots", flag: "allow-root", value: listValue{get: func(c *daemonConfig) *[]string { return &c.AllowRoots }},
			help: "directory, or s3://bucket/prefix, clients may name data, resume and save paths under (repeatable; default: any path)", docDefault: "none (any path)",
			doc: "Repeatable. Dataset paths, tokenizer files named by path, `resume_from` and save folders must lie under one of these directories, and so must every file the daemon opens through them (symlinks resolved: a link leading out is refused). An `s3://bucket/prefix` root allows the objects under that prefix (`s3://b/data` allows `s3://b/data/x`, not `s3://b/database`); once any root is given, a dataset outside them all is refused before any request."},
		{key: "shm_dir", flag: "shm-dir", value: stringValue{get: func(c *daemonConfig) *string { return &c.ShmDir }, def: "/dev/shm"},
			help: "directory of the shared-memory rings (default {})", docDefault: "`{}`",
			doc: "Where shared-memory rings are created (files `dataloaderd-<instance>-<session>`, mode 0600), and the control blocks of cuda sessions (`dataloaderd-<instance>-<session>.ctl`; without a writable directory, cuda batches are announced by messages). The daemon holds a lock on `dataloaderd-<instance>.lock` there while it runs; at start it removes the files of every dead daemon (one whose lock is free: killed, say), never those of a live one sharing the directory."},
		{key: "slots", flag: "slots", value: intValue{get: func(c *daemonConfig) *int { return &c.Slots }, def: session.DefaultSlots, valid: within(2, session.MaxSlots)},
			help: "ring slots per session when the client asks for none (default {})", docDefault: "{}",
			doc: "Ring slots per session when the client asks for none: the prefetch depth and the bound on ring memory."},
		{key: "attach_within", flag: "attach-within", value: durationValue{get: func(c *daemonConfig) *string { return &c.AttachWithin }, def: session.DefaultAttachWithin,
			into: func(ok *checked) *time.Duration { return &ok.attachWithin }},
			help: "reclaim a session whose consumer has not opened its batch stream after this long (default {})", docDefault: "`{}`",
			doc: "A session whose consumer has not opened its batch stream by then is reclaimed."},
		{key: "idle_limit", flag: "idle-limit", value: durationValue{get: func(c *daemonConfig) *string { return &c.IdleLimit }, def: 6 * time.Hour, zeroOK: true,
			into: func(ok *checked) *time.Duration { return &ok.idleLimit }},
			help: "reclaim a session whose attached consumers released no batch for this long; 0 never (default {})", docDefault: "`{}`",
			doc: "A session with an attached batch stream whose consumers released no batch for this long (a trainer stopped or hung) is reclaimed, its ring freed; its loader then raises `SessionNotFoundError` naming the flag. Longer than any pause of your loop between batches (evaluation, checkpointing); `0` never reclaims."},
		{key: "keep_detached", flag: "keep-detached", value: durationValue{get: func(c *daemonConfig) *string { return &c.KeepDetached }, def: session.DefaultKeepDetached, zeroOK: true,
			into: func(ok *checked) *time.Duration { return &ok.keepDetached }},
			help: "keep the session of a rank whose process died without closing for this long, for a new process to go on from its last released batch; 0 reclaims it at once (default {})", docDefault: "`{}`",
			doc: "When a rank's process dies without closing its session (kill -9, an OOM kill, a crash; the daemon sees the process exit), its session is kept this long at the last batch the process released: a new process of the same user opening the same job and `dp_rank` with the same config and no resume point goes on from there, handed again the batches the dead one held unreleased (docs/rank-restart.md). `Loader(fresh=True)` or a resume point starts over instead. Past it the session is reclaimed, its ring freed (`dataloaderd_lost_consumers_total`). `0` reclaims it at once."},
		{key: "stall_log", flag: "stall-log", value: durationValue{get: func(c *daemonConfig) *string { return &c.StallLog }, def: session.DefaultStallLog, zeroOK: true,
			into: func(ok *checked) *time.Duration { return &ok.stallLog }},
			help: "log a consumer's wait for one batch this long or longer, with its cause; 0 never (default {})", docDefault: "`{}`",
			doc: "A consumer's wait for one batch this long or longer is logged (a warning naming the job, dp_rank, step, the wait and its main cause, with the batch's time by cause), at most one line a minute per session, with the count of those not logged. docs/metrics.md (\"Which rank waited, and why\"). `0` logs none."},
		{key: "max_sessions_per_user", flag: "max-sessions-per-user", value: intValue{get: func(c *daemonConfig) *int { return &c.MaxSessionsPerUser }, def: 1024, valid: atLeast(1)},
			help: "sessions one user (by the uid of its processes) may have open at once (default {})", docDefault: "{}",
			doc: "Sessions one user (the uid of the calling processes, from the socket's peer credentials) may have open at once; past it an open is refused with `ResourceExhaustedError` naming the flag. Sessions and job names are per user: docs/security.md."},
		{key: "ring_budget_mb", flag: "ring-budget-mb", value: intValue{get: func(c *daemonConfig) *int { return &c.RingBudgetMB }, valid: notNegative(" (0: derived from RAM and the shm directory)")},
			help:       "MiB of host memory all sessions' rings (inline and shm) may hold together; a session past it is refused (default {}: half of the smallest of RAM, the shm directory's filesystem and the memory limit)",
			docDefault: "half of the smallest of RAM, the `--shm-dir` filesystem and the memory limit",
			doc:        "MiB of host memory the rings of all sessions (`inline` in the daemon, `shm` in the shm directory) may hold together; `cuda` rings are on GPUs and not counted. A session whose ring would pass it is refused with `ResourceExhaustedError` naming the flag, before anything is allocated. An inline ring holds its slots and no copy of them (a batch goes to the socket from its slot). With a memory limit it must fit with the caches and the reserve (`--memory-reserve-mb`). The daemon logs the budgets at start."},
		{key: "memory_reserve_mb", flag: "memory-reserve-mb", value: intValue{get: func(c *daemonConfig) *int { return &c.MemoryReserveMB }, def: defaultMemoryReserveMB, valid: notNegative("")},
			help: "MiB of the cgroup's memory limit kept for the daemon itself beside the ring budget and the caches (default {})", docDefault: "{}",
			doc: "MiB of the memory limit (the memory cgroup's `memory.max`, or `memory.limit_in_bytes` in v1, of the daemon's cgroup and its parents, read at start) kept for the daemon itself beside its budgets: rings, `--token-cache-mb` and, without `--object-cache-dir`, `--object-cache-mb` together get at most the limit less this. Budgets you set that do not fit refuse the start, naming them and the limit; budgets left at their defaults are lowered to fit (under a limit the defaults are half of it for rings, an eighth for the token cache, a quarter for the object cache), each logged. No limit: nothing is checked. docs/security.md."},
	}
}

// processSettings are the daemon process's: logs, stopping, tokenizing,
// scheduling, the CUDA driver.
func processSettings() []setting {
	return []setting{
		{key: "log_level", flag: "log-level", value: stringValue{get: func(c *daemonConfig) *string { return &c.LogLevel }, def: "info", valid: logLevel},
			help: "debug, info, warn or error (default {})", docDefault: "`{}`",
			doc: "zap JSON logs on stderr: `debug`, `info`, `warn`, `error`."},
		{key: "stop_timeout", flag: "stop-timeout", value: durationValue{get: func(c *daemonConfig) *string { return &c.StopTimeout }, def: 10 * time.Second,
			into: func(ok *checked) *time.Duration { return &ok.stopTimeout }},
			help: "longest wait for streams to end on SIGTERM (default {})", docDefault: "`{}`",
			doc: "On SIGTERM/SIGINT: sessions are closed, rings removed, and streams get this long to end."},
		{key: "exit_with_parent", flag: "exit-with-parent", value: intValue{get: func(c *daemonConfig) *int { return &c.ExitWithParent }},
			help: "PID of the daemon's parent: stop as on SIGTERM when it exits, even by SIGKILL (default {}: off)", docDefault: "{} (off)",
			doc: "The PID of the daemon's parent (a launcher script's `$$`): when that process exits, even by SIGKILL, the kernel sends the daemon SIGTERM and it stops as above, removing its socket and rings and freeing its metrics port. A daemon whose parent is not that PID at start (it already exited) refuses to start. `deploy/torchrun-with-dataloaderd.sh` uses it."},
		{key: "tokenize_workers", flag: "tokenize-workers", value: intValue{get: func(c *daemonConfig) *int { return &c.TokenizeWorkers }, def: runtime.NumCPU(), valid: within(1, 4096)},
			help: "workers tokenizing text datasets ahead of demand (default: one per core)", docDefault: "cores",
			doc: "Workers tokenizing text datasets ahead of demand, shared by every session."},
		{key: "token_cache_mb", flag: "token-cache-mb", value: intValue{get: func(c *daemonConfig) *int { return &c.TokenCacheMB }, def: defaultTokenCacheMB, valid: atLeast(minCacheMB)},
			help: "MiB of tokenized text units kept in memory (default {})", docDefault: "{} (under a memory limit, at most an eighth of it)",
			doc: "MiB of tokenized text units kept in memory, shared by every session. Each shard a rank reads keeps its current unit cached (256 KiB blocks of JSONL text, plain or compressed; a Parquet row group): 8 ranks of 64 shards of JSONL need about 128 MiB. A compressed file whose header has no usable size (a zstd frame without its content size, e.g. written from a pipe) is one unit, tokenized whole; the daemon warns of those at open. Watch `dataloaderd_token_cache_misses_total`. " + minimumMB},
		{key: "tokenizer_dirs", flag: "tokenizer-dir", value: listValue{get: func(c *daemonConfig) *[]string { return &c.TokenizerDirs }},
			help: "directory holding <encoding>.tiktoken rank files for built-in tokenizer names (repeatable; then $DATALOADERD_TOKENIZERS)", docDefault: "none",
			doc: "Repeatable. Directories holding `<encoding>.tiktoken` rank files for built-in tokenizer names (checked against tiktoken's SHA-256), searched before `$DATALOADERD_TOKENIZERS`."},
		{key: "batch_scheduling", flag: "batch-scheduling", value: boolValue{get: func(c *daemonConfig) *bool { return &c.BatchScheduling }, def: true},
			help: "run the daemon's threads as SCHED_BATCH, so that waking them never preempts a trainer", docDefault: "{}",
			doc: "Run the daemon's threads as `SCHED_BATCH`: when a trainer's release wakes the producer, it waits for the core's next turn instead of preempting the trainer (docs/benchmarks.md says what it changed on the wait in `next()`)."},
		{key: "cuda_library", flag: "cuda-library", value: stringValue{get: func(c *daemonConfig) *string { return &c.CUDALibrary }, def: cuda.DefaultLibrary},
			help: "the NVIDIA driver library the cuda transport loads, a name or a path (default {})", docDefault: "`{}`",
			doc: "The NVIDIA driver library the `cuda` transport loads when a session first asks for it: a name the dynamic loader searches for, or a path (for a driver outside the loader's path, as in some containers). Without it the `cuda` transport is refused and `shm`/`inline` work as before."},
	}
}

// objectSettings are object storage's (s3:// datasets): the node's cache
// and the client.
func objectSettings() []setting {
	return []setting{
		{key: "object_cache_mb", flag: "object-cache-mb", value: intValue{get: func(c *daemonConfig) *int { return &c.ObjectCacheMB }, def: objstore.DefaultMemoryBytes >> 20, valid: atLeast(minCacheMB)},
			help: "MiB of memory caching s3:// objects for every session (default {})", docDefault: "{} (under a memory limit, at most a quarter of it)",
			doc: "MiB of memory holding the blocks of `s3://` objects, shared by every session (without `--object-cache-dir`). Blocks no read holds are evicted oldest first; what is fetched ahead and not yet read is kept under half of it. When `--allow-root`s are given and none names a bucket, the daemon has no object store and this takes nothing. " + minimumMB},
		{key: "object_cache_dir", flag: "object-cache-dir", value: stringValue{get: func(c *daemonConfig) *string { return &c.ObjectCacheDir }, valid: writableDir},
			help: "directory to cache s3:// objects in instead of memory, within --object-cache-disk-mb (default: memory)", docDefault: "none (memory)",
			doc: "A local directory to hold the blocks instead, within `--object-cache-disk-mb`; the kernel's page cache keeps the hot ones in memory. The blocks are kept across restarts: by object and version (ETag, else size and `Last-Modified`), each with a CRC-32C checked before it is first read again, so a replaced object or a block a crash cut short is fetched again. One daemon per directory: a second is refused at start, naming it. Size it to the corpus and every later epoch, restart and job on the node reads nothing from the store (docs/objects.md)."},
		{key: "object_cache_disk_mb", flag: "object-cache-disk-mb", value: intValue{get: func(c *daemonConfig) *int { return &c.ObjectCacheDiskMB }, def: objstore.DefaultDiskBytes >> 20, valid: atLeast(minCacheMB)},
			help: "MiB of --object-cache-dir the cache may fill (default {})", docDefault: "{}",
			doc: "MiB of `--object-cache-dir` the cache may fill, counting what earlier runs left there: at start, the objects used longest ago are removed to fit. Beside it each object kept has a journal, compacted as the daemon runs: at most about 32 bytes a block and 1 KiB an object (0.05% of it with 64 KiB blocks; `dataloaderd_object_cache_journal_bytes`). " + minimumMB},
		{key: "object_block_kb", flag: "object-block-kb", value: intValue{get: func(c *daemonConfig) *int { return &c.ObjectBlockKB }, def: objstore.DefaultBlockSize >> 10, valid: objectBlock},
			help: "KiB of an s3:// object fetched and cached as one block, the least a read fetches (default {})", docDefault: "{}",
			doc: "KiB of an object the cache fetches and keeps as one block: the least a read fetches (absent blocks in a row go in one GET of up to 16 MiB). Smaller blocks fetch less beside the documents read when the cache is smaller than the corpus; larger ones make fewer requests. A multiple of 4 in [4, 262144]."},
		{key: "object_concurrency", flag: "object-concurrency", value: intValue{get: func(c *daemonConfig) *int { return &c.ObjectConcurrency }, def: objstore.DefaultConcurrency, valid: within(1, 1024)},
			help: "ranged GETs run ahead of demand at once (default {})", docDefault: "{}",
			doc: "GETs running ahead of demand at once (reads that miss fetch beside them). Raise it for a store with high latency."},
		{key: "object_retry_for", flag: "object-retry-for", value: durationValue{get: func(c *daemonConfig) *string { return &c.ObjectRetryFor }, def: objstore.DefaultRetryFor,
			into: func(ok *checked) *time.Duration { return &ok.objectRetryFor }},
			help: "how long a request to object storage is retried (throttling, 5xx, timeouts) before the sessions reading it fail (default {})", docDefault: "`{}`",
			doc: "How long a request is retried, with jittered backoff, when the store throttles (`SlowDown`, 429, 503), fails (5xx) or cannot be reached; after that the sessions reading the object fail with an error naming it."},
		{key: "object_path_style", flag: "object-path-style", value: stringValue{get: func(c *daemonConfig) *string { return &c.ObjectPathStyle }, def: "auto", valid: oneOf("auto", "true", "false")},
			help: "address buckets by path: auto (when a custom endpoint is set), true or false (default {})", docDefault: "`{}`",
			doc: "Address buckets by path (`https://host/bucket/key`): `auto` does when a custom endpoint is set, `true` always, `false` never (virtual hosts)."},
		{key: "object_allow_unversioned", flag: "object-allow-unversioned", value: boolValue{get: func(c *daemonConfig) *bool { return &c.ObjectAllowUnversioned }},
			help: "read s3:// objects the store gives neither an ETag nor a Last-Modified date, pinned by their size alone (a replacement of the same size goes unseen); without it they are refused", docDefault: "`{}`",
			doc: "Read `s3://` objects the store gives neither an ETag nor a `Last-Modified` date, pinned by their size alone: a replacement of the same size then goes unseen. Without it they are refused at open, naming the object (docs/objects.md, \"Bounds and versions\")."},
		{key: "object_require_working_set", flag: "object-require-working-set", value: boolValue{get: func(c *daemonConfig) *bool { return &c.RequireWorkingSet }},
			help: "refuse a session whose s3:// datasets would make the working set of the sessions open larger than the object cache; without it such a session is a warning", docDefault: "`{}`",
			doc: "Refuse an open (`RESOURCE_EXHAUSTED`) whose `s3://` datasets would make the working set of the sessions open (the index entries the windows read, and each owned shard's open shuffle window and the next or the units fetched ahead) larger than the object cache. Without it such an open is logged as a warning naming `--object-cache-mb` and `--object-cache-dir`. `dataloaderd plan` shows a job's working set (docs/objects.md, \"Sizing the cache\")."},
	}
}

// minCacheMB is the least MiB a cache setting takes (--token-cache-mb,
// --object-cache-mb, --object-cache-disk-mb); minimumMB says so in their
// README rows.
const minCacheMB = 16

var minimumMB = fmt.Sprintf("At least %d.", minCacheMB)

// atLeast checks an int setting is at least min.
func atLeast(min int) func(key string, v int) error {
	return func(key string, v int) error {
		if v < min {
			return fmt.Errorf("%s must be at least %d, got %d", key, min, v)
		}
		return nil
	}
}

// within checks an int setting is in [lo, hi].
func within(lo, hi int) func(key string, v int) error {
	return func(key string, v int) error {
		if v < lo || v > hi {
			return fmt.Errorf("%s must be in [%d, %d], got %d", key, lo, hi, v)
		}
		return nil
	}
}

// notNegative checks an int setting is 0 or more; note says what 0 means.
func notNegative(note string) func(key string, v int) error {
	return func(key string, v int) error {
		if v < 0 {
			return fmt.Errorf("%s must be >= 0%s, got %d", key, note, v)
		}
		return nil
	}
}

// oneOf checks a string setting is one of words.
func oneOf(words ...string) func(key, v string, _ *checked) error {
	return func(key, v string, _ *checked) error {
		for _, w := range words {
			if v == w {
				return nil
			}
		}
		return fmt.Errorf("%s %q: want %s or %s", key, v, strings.Join(words[:len(words)-1], ", "), words[len(words)-1])
	}
}

// logLevel checks the log level and keeps it parsed.
func logLevel(key, v string, ok *checked) error {
	lvl, err := zapcore.ParseLevel(v)
	if err != nil {
		return fmt.Errorf("%s %q: want debug, info, warn or error", key, v)
	}
	ok.logLevel = lvl
	return nil
}

// writableDir checks a directory setting, when set, names a directory the
// daemon may write in.
func writableDir(key, v string, _ *checked) error {
	if v == "" {
		return nil
	}
	if info, err := os.Stat(v); err != nil || !info.IsDir() {
		return fmt.Errorf("%s %q: not a directory", key, v)
	}
	if err := unix.Access(v, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("%s %q: not writable: %w", key, v, err)
	}
	return nil
}

// objectBlock checks the object cache's block size in KiB.
func objectBlock(key string, v int) error {
	if v < 4 || v > 256<<10 || v%4 != 0 {
		return fmt.Errorf("%s must be a multiple of 4 in [4, %d], got %d", key, 256<<10, v)
	}
	return nil
}
