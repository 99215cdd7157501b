package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sync/errgroup"

	"github.com/dataloaderd/dataloaderd/internal/ring"
	"github.com/dataloaderd/dataloaderd/internal/server"
)

// serve runs the daemon until ctx ends: it reads and checks the settings,
// builds each component (newDaemon) and runs the gRPC server, the session
// reaper and the metrics server as tasks, the first failure stopping the
// rest.
func serve(ctx context.Context, args []string, stderr io.Writer) error {
	cfg, err := parseServe(args, stderr)
	if err != nil {
		return err
	}
	ok, err := cfg.check()
	if err != nil {
		return err
	}
	if cfg.ExitWithParent != 0 {
		if err := exitWithParent(cfg.ExitWithParent); err != nil {
			return err
		}
	}
	log, err := newLogger(ok.logLevel)
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
	d, err := newDaemon(cfg, ok, shmInstance, log)
	if err != nil {
		return err
	}
	defer d.close()
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
	return d.run(ctx, cfg, lis, metricsLis)
}

func newLogger(level zapcore.Level) (*zap.Logger, error) {
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(level)
	zc.Sampling = nil
	return zc.Build()
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
