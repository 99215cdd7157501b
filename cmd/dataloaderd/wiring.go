package main

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/dataloaderd/dataloaderd/internal/cuda"
	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/server"
	"github.com/dataloaderd/dataloaderd/internal/session"
	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// daemon is the running daemon's components.
type daemon struct {
	log         *zap.Logger
	srv         *server.Server
	sessions    *session.Manager
	reg         *prometheus.Registry
	stopTimeout time.Duration
	mem         memoryBudgets
	// res and objects (nil: none) are closed by close.
	res     *stream.Resources
	objects *objstore.Store
}

// newDaemon builds the daemon's components from checked settings: its
// memory budgets fitted to the limit, the tokenizers' resources, the
// metrics registry, the object store (or none, logged), the session
// manager and the gRPC server. close ends them.
func newDaemon(cfg daemonConfig, ok checked, shmInstance string, log *zap.Logger) (*daemon, error) {
	mem, err := fitToLimit(cfg, log)
	if err != nil {
		return nil, err
	}
	d := &daemon{log: log, stopTimeout: ok.stopTimeout, mem: mem, reg: prometheus.NewRegistry(),
		res: stream.NewResources(cfg.TokenizeWorkers, mem.tokenCache, cfg.TokenizerDirs)}
	d.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	objMetrics := objstore.NewMetrics(d.reg)
	objMetrics.Touch()
	if d.objects, err = openObjects(cfg, ok, mem, objMetrics, log); errors.Is(err, objstore.ErrCacheInUse) {
		d.close() // another daemon's cache directory: a mistake to say, not to run past
		return nil, err
	} else if err != nil {
		// A node that reads no object storage runs on; s3:// datasets are
		// refused, and this says why.
		log.Warn("object storage off: s3:// datasets will be refused", zap.Error(err))
	}
	d.sessions, err = session.New(session.Config{
		Objects: d.objects, RequireWorkingSet: cfg.RequireWorkingSet,
		RingBudget: mem.ring, MaxSessionsPerUser: cfg.MaxSessionsPerUser,
		Logger: log.Named("session"), Registry: d.reg, AllowRoots: cfg.AllowRoots,
		ShmDir: cfg.ShmDir, ShmInstance: shmInstance, Slots: cfg.Slots, AttachWithin: ok.attachWithin, IdleLimit: ok.idleLimit, KeepDetached: ok.keepDetached, StallLog: ok.stallLog, Resources: d.res,
		OpenCUDA: func() (cuda.Driver, error) { return cuda.OpenDriver(cfg.CUDALibrary) },
	})
	if err != nil {
		d.close()
		return nil, err
	}
	d.srv = server.New(server.Config{Logger: log.Named("server"), Sessions: d.sessions, StopTimeout: ok.stopTimeout})
	return d, nil
}

// close ends what newDaemon made, the last made first.
func (d *daemon) close() {
	if d.objects != nil {
		d.objects.Close()
	}
	d.res.Close()
}
