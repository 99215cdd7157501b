package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/dataloaderd/dataloaderd/internal/cuda"
	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/ring"
	"github.com/dataloaderd/dataloaderd/internal/server"
	"github.com/dataloaderd/dataloaderd/internal/session"
	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// daemonConfig is the daemon's configuration: a JSON file (--config) read
// first, flags on top. The README's "Daemon flags" table documents every key.
type daemonConfig struct {
	Socket       string   `json:"socket"`
	MetricsAddr  string   `json:"metrics_addr"`
	AllowRoots   []string `json:"allow_roots"`
	ShmDir       string   `json:"shm_dir"`
	Slots        int      `json:"slots"`
	AttachWithin string   `json:"attach_within"`
	// IdleLimit reclaims attached sessions that released nothing that long.
	IdleLimit   string `json:"idle_limit"`
	LogLevel    string `json:"log_level"`
	StopTimeout string `json:"stop_timeout"`
	// Text datasets tokenized on the fly.
	TokenizeWorkers int `json:"tokenize_workers"`
	TokenCacheMB    int `json:"token_cache_mb"`
	// RingBudgetMB bounds the host memory of all rings together; 0 derives
	// it from RAM and the shm directory (ringBudget).
	RingBudgetMB int `json:"ring_budget_mb"`
	// MemoryReserveMB is the memory the daemon keeps for itself beside its
	// budgets when they are fitted to its cgroup's memory limit.
	MemoryReserveMB int `json:"memory_reserve_mb"`
	// MaxSessionsPerUser bounds one user's open sessions.
	MaxSessionsPerUser int      `json:"max_sessions_per_user"`
	TokenizerDirs      []string `json:"tokenizer_dirs"`
	// BatchScheduling runs the daemon's threads as SCHED_BATCH.
	BatchScheduling bool `json:"batch_scheduling"`
	// Object storage (s3:// datasets): the node cache and the client.
	ObjectCacheMB     int    `json:"object_cache_mb"`
	ObjectCacheDir    string `json:"object_cache_dir"`
	ObjectCacheDiskMB int    `json:"object_cache_disk_mb"`
	ObjectBlockKB     int    `json:"object_block_kb"`
	ObjectConcurrency int    `json:"object_concurrency"`
	ObjectRetryFor    string `json:"object_retry_for"`
	ObjectPathStyle   string `json:"object_path_style"`
	// ObjectAllowUnversioned reads objects the store gives neither an ETag
	// nor a Last-Modified date, pinned by their size alone.
	ObjectAllowUnversioned bool `json:"object_allow_unversioned"`
	// CUDALibrary is the driver library the cuda transport loads on first use.
	CUDALibrary string `json:"cuda_library"`
	// ExitWithParent is the PID of the daemon's parent, with which it stops
	// (0: it runs on).
	ExitWithParent int `json:"exit_with_parent"`
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func parseServe(args []string, stderr io.Writer) (daemonConfig, error) {
	cfg := daemonConfig{Socket: defaultSocket(), ShmDir: "/dev/shm", Slots: session.DefaultSlots,
		AttachWithin: session.DefaultAttachWithin.String(), LogLevel: "info", StopTimeout: "10s", IdleLimit: "6h", MaxSessionsPerUser: 1024,
		TokenizeWorkers: runtime.NumCPU(), TokenCacheMB: defaultTokenCacheMB, MemoryReserveMB: defaultMemoryReserveMB, BatchScheduling: true, CUDALibrary: cuda.DefaultLibrary,
		ObjectCacheMB: objstore.DefaultMemoryBytes >> 20, ObjectCacheDiskMB: objstore.DefaultDiskBytes >> 20,
		ObjectBlockKB: objstore.DefaultBlockSize >> 10, ObjectConcurrency: objstore.DefaultConcurrency,
		ObjectRetryFor: objstore.DefaultRetryFor.String(), ObjectPathStyle: "auto"}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configFile := fs.String("config", "", "JSON file of daemon settings, read before the flags")
	socket := fs.String("socket", "", "unix socket to serve on (unix:///path or a path; default "+cfg.Socket+")")
	metricsAddr := fs.String("metrics-addr", "", "HOST:PORT to serve Prometheus /metrics on (default: off)")
	var allow multiFlag
	fs.Var(&allow, "allow-root", "directory, or s3://bucket/prefix, clients may name data, resume and save paths under (repeatable; default: any path)")
	objCacheMB := fs.Int("object-cache-mb", 0, fmt.Sprintf("MiB of memory caching s3:// objects for every session (default %d)", objstore.DefaultMemoryBytes>>20))
	objCacheDir := fs.String("object-cache-dir", "", "directory to cache s3:// objects in instead of memory, within --object-cache-disk-mb (default: memory)")
	objCacheDiskMB := fs.Int("object-cache-disk-mb", 0, fmt.Sprintf("MiB of --object-cache-dir the cache may fill (default %d)", objstore.DefaultDiskBytes>>20))
	objBlockKB := fs.Int("object-block-kb", 0, fmt.Sprintf("KiB of an s3:// object fetched and cached as one block, the least a read fetches (default %d)", objstore.DefaultBlockSize>>10))
	objConc := fs.Int("object-concurrency", 0, fmt.Sprintf("ranged GETs run ahead of demand at once (default %d)", objstore.DefaultConcurrency))
	objRetry := fs.Duration("object-retry-for", 0, "how long a request to object storage is retried (throttling, 5xx, timeouts) before the sessions reading it fail (default "+objstore.DefaultRetryFor.String()+")")
	objPath := fs.String("object-path-style", "", "address buckets by path: auto (when a custom endpoint is set), true or false (default auto)")
	objUnversioned := fs.Bool("object-allow-unversioned", false, "read s3:// objects the store gives neither an ETag nor a Last-Modified date, pinned by their size alone (a replacement of the same size goes unseen); without it they are refused")
	shmDir := fs.String("shm-dir", "", "directory of the shared-memory rings (default /dev/shm)")
	slots := fs.Int("slots", 0, fmt.Sprintf("ring slots per session when the client asks for none (default %d)", session.DefaultSlots))
	attach := fs.Duration("attach-within", 0, "reclaim a session whose consumer has not opened its batch stream after this long (default 1m)")
	idle := fs.Duration("idle-limit", 0, "reclaim a session whose attached consumers released no batch for this long; 0 never (default 6h)")
	logLevel := fs.String("log-level", "", "debug, info, warn or error (default info)")
	stopTimeout := fs.Duration("stop-timeout", 0, "longest wait for streams to end on SIGTERM (default 10s)")
	workers := fs.Int("tokenize-workers", 0, "workers tokenizing text datasets ahead of demand (default: one per core)")
	cacheMB := fs.Int("token-cache-mb", 0, "MiB of tokenized text units kept in memory (default 1024)")
	perUser := fs.Int("max-sessions-per-user", 0, "sessions one user (by the uid of its processes) may have open at once (default 1024)")
	ringMB := fs.Int("ring-budget-mb", 0, "MiB of host memory all sessions' rings (inline and shm) may hold together; a session past it is refused (default 0: half of the smallest of RAM, the shm directory's filesystem and the memory limit)")
	reserveMB := fs.Int("memory-reserve-mb", 0, fmt.Sprintf("MiB of the cgroup's memory limit kept for the daemon itself beside the ring budget and the caches (default %d)", defaultMemoryReserveMB))
	batchSched := fs.Bool("batch-scheduling", true, "run the daemon's threads as SCHED_BATCH, so that waking them never preempts a trainer")
	cudaLib := fs.String("cuda-library", "", "the NVIDIA driver library the cuda transport loads, a name or a path (default "+cuda.DefaultLibrary+")")
	exitWithParent := fs.Int("exit-with-parent", 0, "PID of the daemon's parent: stop as on SIGTERM when it exits, even by SIGKILL (default 0: off)")
	var tokDirs multiFlag
	fs.Var(&tokDirs, "tokenizer-dir", "directory holding <encoding>.tiktoken rank files for built-in tokenizer names (repeatable; then $DATALOADERD_TOKENIZERS)")
	if err := parseFlags(fs, serveUsage, args, stderr); err != nil {
		return cfg, err
	}
	if err := readConfigFile(*configFile, &cfg); err != nil {
		return cfg, err
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "socket":
			cfg.Socket = *socket
		case "metrics-addr":
			cfg.MetricsAddr = *metricsAddr
		case "allow-root":
			cfg.AllowRoots = allow
		case "shm-dir":
			cfg.ShmDir = *shmDir
		case "slots":
			cfg.Slots = *slots
		case "attach-within":
			cfg.AttachWithin = attach.String()
		case "idle-limit":
			cfg.IdleLimit = idle.String()
		case "log-level":
			cfg.LogLevel = *logLevel
		case "stop-timeout":
			cfg.StopTimeout = stopTimeout.String()
		case "tokenize-workers":
			cfg.TokenizeWorkers = *workers
		case "token-cache-mb":
			cfg.TokenCacheMB = *cacheMB
		case "ring-budget-mb":
			cfg.RingBudgetMB = *ringMB
		case "memory-reserve-mb":
			cfg.MemoryReserveMB = *reserveMB
		case "max-sessions-per-user":
			cfg.MaxSessionsPerUser = *perUser
		case "tokenizer-dir":
			cfg.TokenizerDirs = tokDirs
		case "batch-scheduling":
			cfg.BatchScheduling = *batchSched
		case "cuda-library":
			cfg.CUDALibrary = *cudaLib
		case "object-cache-mb":
			cfg.ObjectCacheMB = *objCacheMB
		case "object-cache-dir":
			cfg.ObjectCacheDir = *objCacheDir
		case "object-cache-disk-mb":
			cfg.ObjectCacheDiskMB = *objCacheDiskMB
		case "object-block-kb":
			cfg.ObjectBlockKB = *objBlockKB
		case "object-concurrency":
			cfg.ObjectConcurrency = *objConc
		case "object-retry-for":
			cfg.ObjectRetryFor = objRetry.String()
		case "object-path-style":
			cfg.ObjectPathStyle = *objPath
		case "object-allow-unversioned":
			cfg.ObjectAllowUnversioned = *objUnversioned
		case "exit-with-parent":
			cfg.ExitWithParent = *exitWithParent
		}
	})
	if err := noArgs(fs); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// readConfigFile decodes the JSON file at path (none when empty) over cfg,
// refusing unknown keys.
func readConfigFile(path string, cfg *daemonConfig) error {
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(cfg); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

func newLogger(level string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("log_level %q: want debug, info, warn or error", level)
	}
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(lvl)
	zc.Sampling = nil
	return zc.Build()
}

// serve runs the daemon until ctx ends: it reads the settings, builds each
// component and runs the gRPC server, the session reaper and the metrics
// server as tasks, the first failure stopping the rest.
func serve(ctx context.Context, args []string, stderr io.Writer) error {
	cfg, err := parseServe(args, stderr)
	if err != nil {
		return err
	}
	dur, err := cfg.check()
	if err != nil {
		return err
	}
	if cfg.ExitWithParent != 0 {
		if err := exitWithParent(cfg.ExitWithParent); err != nil {
			return err
		}
	}
	log, err := newLogger(cfg.LogLevel)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck
	var shmInstance string
	if claim := claimShm(cfg.ShmDir, log); claim != nil {
		defer func() {
			if err := claim.Release(); err != nil {
				log.Warn("releasing the shm directory", zap.Error(err))
			}
		}()
		shmInstance = claim.Instance()
	}

	if cfg.BatchScheduling {
		if err := batchScheduling(); err != nil {
			log.Warn("running with normal scheduling", zap.Error(err))
		}
	}
	mem, err := fitToLimit(cfg, log)
	if err != nil {
		return err
	}
	res := stream.NewResources(cfg.TokenizeWorkers, mem.tokenCache, cfg.TokenizerDirs)
	defer res.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	objMetrics := objstore.NewMetrics(reg)
	objMetrics.Touch()
	objects, err := openObjects(cfg, dur, mem, objMetrics, log)
	if err != nil {
		// A node that reads no object storage runs on; s3:// datasets are
		// refused, and this says why.
		log.Warn("object storage off: s3:// datasets will be refused", zap.Error(err))
	} else {
		defer objects.Close()
	}
	sessions, err := session.New(session.Config{
		Objects:    objects,
		RingBudget: mem.ring, MaxSessionsPerUser: cfg.MaxSessionsPerUser,
		Logger: log.Named("session"), Registry: reg, AllowRoots: cfg.AllowRoots,
		ShmDir: cfg.ShmDir, ShmInstance: shmInstance, Slots: cfg.Slots, AttachWithin: dur.attachWithin, IdleLimit: dur.idleLimit, Resources: res,
		OpenCUDA: func() (cuda.Driver, error) { return cuda.OpenDriver(cfg.CUDALibrary) },
	})
	if err != nil {
		return err
	}
	srv := server.New(server.Config{Logger: log.Named("server"), Sessions: sessions, StopTimeout: dur.stopTimeout})
	lis, cleanup, err := server.Listen(cfg.Socket)
	if err != nil {
		return err
	}
	defer cleanup()
	var metricsLis net.Listener
	if cfg.MetricsAddr != "" {
		if metricsLis, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			return fmt.Errorf("metrics-addr: %w", err)
		}
	}
	d := &daemon{log: log, srv: srv, sessions: sessions, reg: reg, stopTimeout: dur.stopTimeout, mem: mem}
	return d.run(ctx, cfg, lis, metricsLis)
}

// durations are the daemon's settings that are durations, parsed.
type durations struct {
	attachWithin, stopTimeout, idleLimit, objectRetryFor time.Duration
}

// check validates the settings flags cannot type, and returns the durations.
func (cfg daemonConfig) check() (durations, error) {
	var d durations
	var err error
	d.attachWithin, err = time.ParseDuration(cfg.AttachWithin)
	if err != nil || d.attachWithin <= 0 {
		return d, fmt.Errorf("attach_within %q: want a positive duration such as 1m", cfg.AttachWithin)
	}
	d.stopTimeout, err = time.ParseDuration(cfg.StopTimeout)
	if err != nil || d.stopTimeout <= 0 {
		return d, fmt.Errorf("stop_timeout %q: want a positive duration such as 10s", cfg.StopTimeout)
	}
	d.idleLimit, err = time.ParseDuration(cfg.IdleLimit)
	if err != nil || d.idleLimit < 0 {
		return d, fmt.Errorf("idle_limit %q: want a duration such as 6h, or 0 for none", cfg.IdleLimit)
	}
	d.objectRetryFor, err = time.ParseDuration(cfg.ObjectRetryFor)
	if err != nil || d.objectRetryFor <= 0 {
		return d, fmt.Errorf("object_retry_for %q: want a positive duration such as 2m", cfg.ObjectRetryFor)
	}
	if cfg.ObjectCacheDir != "" {
		if info, err := os.Stat(cfg.ObjectCacheDir); err != nil || !info.IsDir() {
			return d, fmt.Errorf("object_cache_dir %q: not a directory", cfg.ObjectCacheDir)
		}
		if err := unix.Access(cfg.ObjectCacheDir, unix.W_OK|unix.X_OK); err != nil {
			return d, fmt.Errorf("object_cache_dir %q: not writable: %w", cfg.ObjectCacheDir, err)
		}
	}
	switch {
	case cfg.ObjectCacheMB < 16:
		return d, fmt.Errorf("object_cache_mb must be at least 16, got %d", cfg.ObjectCacheMB)
	case cfg.ObjectCacheDiskMB < 16:
		return d, fmt.Errorf("object_cache_disk_mb must be at least 16, got %d", cfg.ObjectCacheDiskMB)
	case cfg.ObjectBlockKB < 4 || cfg.ObjectBlockKB > 256<<10 || cfg.ObjectBlockKB%4 != 0:
		return d, fmt.Errorf("object_block_kb must be a multiple of 4 in [4, %d], got %d", 256<<10, cfg.ObjectBlockKB)
	case cfg.ObjectConcurrency < 1 || cfg.ObjectConcurrency > 1024:
		return d, fmt.Errorf("object_concurrency must be in [1, 1024], got %d", cfg.ObjectConcurrency)
	case cfg.ObjectPathStyle != "auto" && cfg.ObjectPathStyle != "true" && cfg.ObjectPathStyle != "false":
		return d, fmt.Errorf("object_path_style %q: want auto, true or false", cfg.ObjectPathStyle)
	}
	switch {
	case cfg.Slots < 2 || cfg.Slots > session.MaxSlots:
		return d, fmt.Errorf("slots must be in [2, %d], got %d", session.MaxSlots, cfg.Slots)
	case cfg.TokenizeWorkers < 1 || cfg.TokenizeWorkers > 4096:
		return d, fmt.Errorf("tokenize_workers must be in [1, 4096], got %d", cfg.TokenizeWorkers)
	case cfg.TokenCacheMB < 16:
		return d, fmt.Errorf("token_cache_mb must be at least 16, got %d", cfg.TokenCacheMB)
	case cfg.MaxSessionsPerUser < 1:
		return d, fmt.Errorf("max_sessions_per_user must be at least 1, got %d", cfg.MaxSessionsPerUser)
	}
	return d, nil
}

// daemon is the running daemon's components.
type daemon struct {
	log         *zap.Logger
	srv         *server.Server
	sessions    *session.Manager
	reg         *prometheus.Registry
	stopTimeout time.Duration
	mem         memoryBudgets
}

// run serves on lis (and /metrics on metricsLis, if not nil) until ctx
// ends or a task fails; the server then closes every session and waits up
// to stopTimeout for the streams to end.
func (d *daemon) run(ctx context.Context, cfg daemonConfig, lis, metricsLis net.Listener) error {
	eg, ctx := errgroup.WithContext(ctx)
	eg.Go(func() error { return d.srv.Serve(ctx, lis) })
	eg.Go(func() error { return d.sessions.Reap(ctx) })
	eg.Go(func() error { return d.mem.keepGoLimit(ctx, d.sessions.HostRingsOutsideHeap) })
	if metricsLis != nil {
		d.serveMetrics(ctx, eg, metricsLis)
	}
	d.log.Info("serving", zap.String("socket", lis.Addr().String()), zap.String("metrics_addr", cfg.MetricsAddr),
		zap.Strings("allow_roots", cfg.AllowRoots), zap.String("version", versionString()))
	if len(cfg.AllowRoots) == 0 {
		d.log.Warn("no --allow-root given: clients may name any path the daemon can read or write")
	}
	if metricsLis != nil && beyondLoopback(metricsLis.Addr()) {
		d.log.Warn("metrics listen beyond loopback: anyone who can reach the port reads job names, dataset names and the node's load; give a loopback host (127.0.0.1:PORT) unless a scraper on another host needs it",
			zap.String("metrics_addr", metricsLis.Addr().String()))
	}
	err := eg.Wait()
	if errors.Is(err, context.Canceled) {
		d.log.Info("stopped") // as asked: SIGTERM, SIGINT, or the parent's exit
	} else {
		d.log.Error("stopped", zap.Error(err))
	}
	return err
}

// claimShm claims the shm directory for this daemon's files and removes
// those that dead daemons left there (ring.Claim). Without a claim (no such
// directory, say) the daemon runs on, its files named by session alone:
// nothing would sweep them after a crash.
func claimShm(dir string, log *zap.Logger) *ring.Claim {
	claim, err := ring.ClaimDir(dir)
	if err != nil {
		log.Warn("shm directory not claimed: files this daemon leaves there if it is killed will not be swept",
			zap.String("shm_dir", dir), zap.Error(err))
		return nil
	}
	swept, err := claim.SweepDead()
	if len(swept) > 0 {
		log.Info("removed the files of dead daemons", zap.String("shm_dir", dir), zap.Strings("files", swept))
	}
	if err != nil {
		log.Warn("sweeping the shm directory", zap.Error(err))
	}
	return claim
}

// beyondLoopback says whether a listener's address takes connections from
// other hosts: any address but a loopback one (":9400" listens on every
// interface).
func beyondLoopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return !ok || !tcp.IP.IsLoopback()
}

// serveMetrics adds the /metrics server and its shutdown to eg.
func (d *daemon) serveMetrics(ctx context.Context, eg *errgroup.Group, lis net.Listener) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{Registry: d.reg}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	eg.Go(func() error {
		if err := hs.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	eg.Go(func() error {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), d.stopTimeout)
		defer cancel()
		return hs.Shutdown(sctx)
	})
}
