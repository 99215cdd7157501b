package main

import (
	"errors"

	"go.uber.org/zap"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
)

// openObjects makes the node's object store and cache, or says why there
// is none: no --allow-root names a bucket (no job may name an s3:// dataset,
// so no cache takes memory), or the AWS configuration cannot be loaded.
func openObjects(cfg daemonConfig, ok checked, mem memoryBudgets, m *objstore.Metrics, log *zap.Logger) (*objstore.Store, error) {
	if !objectsAllowed(cfg.AllowRoots) {
		return nil, errors.New("no --allow-root names an s3:// bucket")
	}
	objects, err := objstore.New(objstore.Options{
		BlockSize: int64(cfg.ObjectBlockKB) << 10, MemoryBytes: mem.objectCache,
		Dir: cfg.ObjectCacheDir, DiskBytes: int64(cfg.ObjectCacheDiskMB) << 20,
		Concurrency: cfg.ObjectConcurrency, RetryFor: ok.objectRetryFor, PathStyle: cfg.ObjectPathStyle,
		AllowUnversioned: cfg.ObjectAllowUnversioned, Metrics: m, Logger: log.Named("objects"),
	})
	if err != nil {
		return nil, err
	}
	if cfg.ObjectAllowUnversioned {
		log.Warn("s3:// objects without an ETag or Last-Modified date are read, pinned by their size alone: a replacement of the same size is not seen")
	}
	return objects, nil
}
