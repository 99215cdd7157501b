package objstore

import (
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"
)

// Defaults of Options.
const (
	DefaultBlockSize      = 64 << 10
	DefaultMemoryBytes    = 2 << 30
	DefaultDiskBytes      = 64 << 30
	DefaultConcurrency    = 32
	DefaultRetryFor       = 2 * time.Minute
	DefaultAttemptTimeout = 60 * time.Second
	// DefaultPrefetchQueue bounds the blocks waiting to be fetched ahead.
	DefaultPrefetchQueue = 1024
)

// Options configure the node's object store and its cache.
type Options struct {
	// BlockSize is the unit of fetching and caching, a multiple of the
	// page size.
	BlockSize int64
	// MemoryBytes is the cache budget when Dir is empty: blocks live in
	// anonymous memory (a memfd per object).
	MemoryBytes int64
	// Dir, when set, holds the blocks in (unlinked, sparse) files there
	// instead, within DiskBytes; the kernel's page cache keeps the hot ones
	// in memory, reclaimably.
	Dir       string
	DiskBytes int64
	// Concurrency is how many fetches run ahead of demand at once.
	Concurrency int
	// RetryFor bounds how long a request is retried (throttling, 5xx,
	// transport errors) before the reads waiting on it fail.
	RetryFor time.Duration
	// AttemptTimeout bounds one request.
	AttemptTimeout time.Duration
	// StaleAhead is how long a block fetched ahead may wait for its read
	// before a newer prefetch may take its place (default 30 s).
	StaleAhead time.Duration
	// PathStyle is "auto" (path-style addressing with a custom endpoint),
	// "true" or "false".
	PathStyle string
	// AllowUnversioned opens objects the store gives neither an ETag nor a
	// Last-Modified date, pinned by their size alone (a replacement of the
	// same size is then not seen); without it they are refused with
	// ErrUnversioned.
	AllowUnversioned bool
	// MaxListPages and MaxListKeys bound one listing (defaults
	// DefaultMaxListPages, DefaultMaxListKeys); so does MaxListBytes, the
	// bytes of its keys and ETags (default DefaultMaxListBytes). What the
	// store remembers of listings is bounded by MaxListKeys objects and
	// MaxListBytes too.
	MaxListPages, MaxListKeys int
	MaxListBytes              int64
	// MaxMappedBytes bounds the sizes of the objects mapped at once
	// (default DefaultMaxMappedBytes).
	MaxMappedBytes int64
	// Metrics, when set, records requests and cache use.
	Metrics *Metrics
	Logger  *zap.Logger
}

func (o *Options) fill() error {
	page := int64(os.Getpagesize())
	if o.BlockSize == 0 {
		o.BlockSize = DefaultBlockSize
	}
	if o.BlockSize < page || o.BlockSize%page != 0 {
		return fmt.Errorf("object cache block size %d: want a positive multiple of the %d-byte page", o.BlockSize, page)
	}
	if o.MemoryBytes == 0 {
		o.MemoryBytes = DefaultMemoryBytes
	}
	if o.DiskBytes == 0 {
		o.DiskBytes = DefaultDiskBytes
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.RetryFor <= 0 {
		o.RetryFor = DefaultRetryFor
	}
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = DefaultAttemptTimeout
	}
	if o.StaleAhead <= 0 {
		o.StaleAhead = 30 * time.Second
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Dir != "" {
		if info, err := os.Stat(o.Dir); err != nil || !info.IsDir() {
			return fmt.Errorf("object cache dir %q: not a directory", o.Dir)
		}
	}
	return o.listBounds()
}
