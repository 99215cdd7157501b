package objstore

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/dataloaderd/dataloaderd/internal/mapped"
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
	return nil
}

// Store is the node's object storage: the client and the cache every
// session reads objects through. Its methods are safe for concurrent use.
type Store struct {
	opts   Options
	client *client
	budget int64

	mu      sync.Mutex
	objects map[string]*Object // by URL; each the latest ETag seen
	// listed is what the latest listings (and HEADs) said of each object,
	// so that opening a dataset just listed makes no HEAD request per object.
	listed map[string]listing
	lru    list.List // present blocks read and no longer held, oldest first
	// aheadLRU holds the present blocks fetched ahead and not yet read.
	aheadLRU list.List
	used     int64 // bytes of present and in-flight blocks
	// aheadBytes are those queued or fetched ahead of demand and not yet
	// read: at most half the budget, so that what is fetched ahead does
	// not evict what is read.
	aheadBytes int64

	queue chan runRef

	punchOnce sync.Once
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

// listing is an object's description from a listing, and when it was made.
type listing struct {
	info Info
	at   time.Time
}

// listedFor is how long a listing stands in for a HEAD request: long enough
// for the opening of the dataset that listed it.
const listedFor = time.Minute

// blockRef names block i of an object, in an LRU; at is when a block
// fetched ahead came in.
type blockRef struct {
	obj *Object
	i   int
	at  time.Time
}

// runRef names blocks [first, last] of an object for the fetchers ahead
// of demand.
type runRef struct {
	obj         *Object
	first, last int
}

// New makes the store; it loads the AWS configuration (no request is made
// until a dataset is opened).
func New(opts Options) (*Store, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c, err := newClient(ctx, opts, opts.Metrics)
	if err != nil {
		cancel()
		return nil, err
	}
	s := &Store{opts: opts, client: c, objects: map[string]*Object{}, listed: map[string]listing{},
		queue: make(chan runRef, DefaultPrefetchQueue), ctx: ctx, cancel: cancel}
	s.budget = opts.MemoryBytes
	if opts.Dir != "" {
		s.budget = opts.DiskBytes
	}
	for range opts.Concurrency {
		s.wg.Add(1)
		go s.fetchAhead()
	}
	return s, nil
}

// Close stops the fetchers ahead of demand and releases every object.
func (s *Store) Close() error {
	s.cancel()
	s.wg.Wait()
	s.client.idle.close()
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for url, o := range s.objects {
		errs = append(errs, o.free())
		delete(s.objects, url)
	}
	s.used = 0
	s.opts.Metrics.cached.Set(0)
	return errors.Join(errs...)
}

// BlockSize is the unit the cache fetches.
func (s *Store) BlockSize() int64 { return s.opts.BlockSize }

// List lists the objects under prefix (sorted by key). Flat lists every key
// under it; otherwise one level, as a directory.
func (s *Store) List(ctx context.Context, bucket, prefix string, flat bool) ([]Info, error) {
	infos, err := s.client.list(ctx, bucket, prefix, flat)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for url, l := range s.listed {
		if now.Sub(l.at) > listedFor {
			delete(s.listed, url)
		}
	}
	for _, info := range infos {
		s.listed[Location{Bucket: bucket, Key: info.Key}.String()] = listing{info: info, at: now}
	}
	return infos, nil
}

// Head describes one object: from a listing or HEAD of the last minute, or
// a HEAD request.
func (s *Store) Head(ctx context.Context, loc Location) (Info, error) {
	s.mu.Lock()
	l, ok := s.listed[loc.String()]
	s.mu.Unlock()
	if ok && time.Since(l.at) <= listedFor {
		return l.info, nil
	}
	info, err := s.client.head(ctx, loc)
	if err == nil {
		s.mu.Lock()
		s.listed[loc.String()] = listing{info: info, at: time.Now()}
		s.mu.Unlock()
	}
	return info, err
}

// Open returns the object at loc for reading, shared with every other
// session that reads it: its size and ETag come from a listing of the last
// minute or a HEAD request.
// An object replaced since it was last opened (another ETag) is a new
// Object; sessions still reading the old one keep it until they close it.
func (s *Store) Open(ctx context.Context, loc Location) (*Object, error) {
	info, err := s.Head(ctx, loc)
	if err != nil {
		return nil, err
	}
	url := loc.String()
	s.mu.Lock()
	defer s.mu.Unlock()
	if o := s.objects[url]; o != nil && o.etag == info.ETag && o.size == info.Size {
		o.refs++
		return o, nil
	}
	o, err := s.newObject(loc, info)
	if err != nil {
		return nil, err
	}
	if old := s.objects[url]; old != nil {
		old.replaced = true
		if old.refs == 0 {
			s.dropLocked(old)
		}
	}
	s.objects[url] = o
	return o, nil
}

// newObject makes the backing file and mapping of an object: a memfd, or
// an unlinked file in Dir, sized to the object and empty (sparse). Pages
// are not protected block by block: with blocks scattered through large
// objects, that would split the mapping into more areas than the kernel
// allows a process (vm.max_map_count); readers hold what they read.
func (s *Store) newObject(loc Location, info Info) (*Object, error) {
	o := &Object{store: s, loc: loc, url: loc.String(), size: info.Size, etag: info.ETag, refs: 1, runs: map[int]*run{}}
	nblocks := (info.Size + s.opts.BlockSize - 1) / s.opts.BlockSize
	o.blocks = make([]block, nblocks)
	if info.Size == 0 {
		return o, nil
	}
	var err error
	if s.opts.Dir == "" {
		var fd int
		fd, err = unix.MemfdCreate("dataloaderd-object", unix.MFD_CLOEXEC)
		if err == nil {
			o.file = os.NewFile(uintptr(fd), loc.String())
		}
	} else {
		o.file, err = os.CreateTemp(s.opts.Dir, "object-*")
		if err == nil {
			err = os.Remove(o.file.Name())
		}
	}
	if err == nil {
		err = o.file.Truncate(info.Size)
	}
	if err == nil {
		o.data, err = unix.Mmap(int(o.file.Fd()), 0, int(info.Size), unix.PROT_READ, unix.MAP_SHARED)
	}
	if err != nil {
		if o.file != nil {
			o.file.Close()
		}
		return nil, fmt.Errorf("%w: %s: backing of %d bytes: %w", ErrObject, o.url, info.Size, err)
	}
	mapped.Register(o.data, o.url)
	return o, nil
}

// dropLocked forgets an object no session reads any more: its present
// blocks leave the budget and its memory is freed.
func (s *Store) dropLocked(o *Object) {
	for i := range o.blocks {
		b := &o.blocks[i]
		o.setAheadLocked(i, false)
		s.unlinkLocked(b)
		if b.state != absent {
			s.used -= o.blockLen(i)
		}
		b.state = absent
	}
	o.present = 0
	s.opts.Metrics.cached.Set(float64(s.used))
	if s.objects[o.url] == o {
		delete(s.objects, o.url)
	}
	if err := o.free(); err != nil {
		s.opts.Logger.Warn("freeing a cached object", zap.String("object", o.url), zap.Error(err))
	}
}

// unlinkLocked takes block b out of whichever LRU holds it.
func (s *Store) unlinkLocked(b *block) {
	if b.elem != nil {
		s.lru.Remove(b.elem) // each is a no-op for the other list's elements
		s.aheadLRU.Remove(b.elem)
		b.elem = nil
	}
}

// reserveLocked makes room for n more bytes by evicting the blocks used
// longest ago that no read holds, those fetched ahead and not yet read
// last (and never for more fetched ahead). When every block is held the cache goes
// over its budget rather than fail a read; ahead of demand it does not:
// ok false says there is no room.
func (s *Store) reserveLocked(n int64, ahead bool) bool {
	for s.used+n > s.budget {
		front := s.lru.Front()
		if front == nil && !ahead {
			// Blocks fetched ahead and not yet read go last.
			front = s.aheadLRU.Front()
		}
		if front == nil {
			if ahead {
				return false
			}
			break
		}
		ref := front.Value.(blockRef)
		ref.obj.evictLocked(ref.i)
	}
	s.used += n
	s.opts.Metrics.cached.Set(float64(s.used))
	return true
}

// fetchAhead is one fetcher of the blocks Prefetch queued.
func (s *Store) fetchAhead() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case ref := <-s.queue:
			ref.obj.fetchQueued(ref.first, ref.last)
		}
	}
}

// punchFailed logs, once, that the cache cannot give back the space of
// evicted blocks (a file system without hole punching): it then uses more
// than its budget.
func (s *Store) punchFailed(err error) {
	s.punchOnce.Do(func() {
		s.opts.Logger.Warn("the object cache cannot punch holes: evicted blocks keep their space", zap.String("dir", s.opts.Dir), zap.Error(err))
	})
}

// Stats are the store's counters, for tests and benchmarks.
type Stats struct {
	Requests, Gets, Heads, Lists, Retries int64
	FetchedBytes                          int64
	Hits, Ahead, Misses                   int64
	Evictions                             int64
	CachedBytes                           int64
}

// Stats reads the counters.
func (s *Store) Stats() Stats {
	m := s.opts.Metrics
	st := Stats{FetchedBytes: int64(counterValue(m.fetched)), Evictions: int64(counterValue(m.evictions)),
		Hits: int64(counterValue(m.hit)), Ahead: int64(counterValue(m.ahead)), Misses: int64(counterValue(m.miss))}
	for _, op := range []string{"get", "head", "list"} {
		for _, outcome := range []string{"ok", "error", "retry_throttled", "retry_server", "retry_transport"} {
			n := int64(counterValue(m.requests.WithLabelValues(op, outcome)))
			st.Requests += n
			switch op {
			case "get":
				st.Gets += n
			case "head":
				st.Heads += n
			case "list":
				st.Lists += n
			}
			if outcome != "ok" && outcome != "error" {
				st.Retries += n
			}
		}
	}
	s.mu.Lock()
	st.CachedBytes = s.used
	s.mu.Unlock()
	return st
}
