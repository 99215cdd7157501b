package objstore

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/dataloaderd/dataloaderd/internal/mapped"
)

// Store is the node's object storage: the client and the cache every
// session reads objects through. Its methods are safe for concurrent use.
type Store struct {
	opts   Options
	client *client
	budget int64
	// shift is log2 of the block size when that is a power of two (as
	// the default's), so that a read's blocks cost no division; else 0.
	shift uint8

	mu      sync.Mutex
	objects map[string]*Object // by URL; each the latest ETag seen
	lru     list.List          // present blocks read and no longer held, oldest first
	// aheadLRU holds the present blocks fetched ahead and not yet read.
	aheadLRU list.List
	used     int64 // bytes of present and in-flight blocks
	mapped   int64 // bytes of the objects mapped
	// aheadBytes are those queued or fetched ahead of demand and not yet
	// read: at most half the budget, so that what is fetched ahead does
	// not evict what is read.
	aheadBytes int64

	queue chan runRef
	// listed is what the latest listings (and HEADs) said of each object
	// (listed.go); it has its own lock.
	listed *listed

	// disk is the cache directory's entries kept from before and of
	// objects dropped; nil in memory.
	disk      *diskCache
	punchOnce sync.Once
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

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
	s := &Store{opts: opts, client: c, objects: map[string]*Object{}, listed: newListed(opts.MaxListKeys, opts.MaxListBytes),
		queue: make(chan runRef, DefaultPrefetchQueue), ctx: ctx, cancel: cancel}
	s.budget = opts.MemoryBytes
	if bs := opts.BlockSize; bs&(bs-1) == 0 {
		s.shift = uint8(bits.TrailingZeros64(uint64(bs)))
	}
	if opts.Dir != "" {
		s.budget = opts.DiskBytes
		if s.disk, s.used, err = openDiskCache(opts.Dir, opts.BlockSize, s.budget, opts.Logger, opts.Metrics); err != nil {
			cancel()
			c.conns.close()
			return nil, err
		}
		opts.Metrics.cached.Set(float64(s.used))
		s.wg.Add(1)
		go s.compactJournals()
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
	s.client.conns.close()
	s.listed.close()
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for url, o := range s.objects {
		errs = append(errs, o.free())
		delete(s.objects, url)
	}
	s.used = 0
	s.opts.Metrics.cached.Set(0)
	if s.disk != nil {
		errs = append(errs, s.disk.close())
	}
	return errors.Join(errs...)
}

// blockOf is the block that byte off lies in.
func (s *Store) blockOf(off int64) int {
	if s.shift != 0 {
		return int(off >> s.shift)
	}
	return int(off / s.opts.BlockSize)
}

// BlockSize is the unit the cache fetches.
func (s *Store) BlockSize() int64 { return s.opts.BlockSize }

// Budget is the bytes the cache may hold: Options.MemoryBytes, or
// DiskBytes with a Dir.
func (s *Store) Budget() int64 { return s.budget }

// List lists the objects under prefix (sorted by key). Flat lists every key
// under it; otherwise one level, as a directory. A listing is bounded
// (Options.MaxListPages, MaxListKeys, MaxListBytes) and ends with ctx.
func (s *Store) List(ctx context.Context, bucket, prefix string, flat bool) ([]Info, error) {
	infos, err := s.client.list(ctx, bucket, prefix, flat)
	if err != nil {
		return nil, err
	}
	s.listed.put(bucket, infos, false)
	return infos, nil
}

// Head describes one object: from a listing or HEAD of the last minute, or
// a HEAD request.
func (s *Store) Head(ctx context.Context, loc Location) (Info, error) {
	return s.head(ctx, loc, false)
}

// head is Head; with headers set, an object a listing gave no ETag is
// described by a HEAD request all the same.
func (s *Store) head(ctx context.Context, loc Location, headers bool) (Info, error) {
	l, ok := s.listed.get(loc)
	if ok && (!headers || l.info.ETag != "" || l.headed) {
		return l.info, nil
	}
	info, err := s.client.head(ctx, loc)
	if err == nil {
		s.listed.put(loc.Bucket, []Info{info}, true)
	}
	return info, err
}

// Open returns the object at loc for reading, shared with every other
// session that reads it. It is pinned to one version: its size, and its
// ETag from a listing of the last minute or a HEAD request; where the store
// gives no ETag, its Last-Modified date from a HEAD (a listing's may differ
// from a GET's). Every GET must answer that version, else ErrChanged. An
// object with neither is refused (ErrUnversioned) unless
// Options.AllowUnversioned.
// An object replaced since it was last opened (another version) is a new
// Object; sessions still reading the old one keep it until they close it.
func (s *Store) Open(ctx context.Context, loc Location) (*Object, error) {
	info, err := s.head(ctx, loc, true)
	if err != nil {
		return nil, err
	}
	url := loc.String()
	v := pin(info)
	if v.unversioned() && !s.opts.AllowUnversioned {
		return nil, &ObjectError{URL: url, Op: "open", Err: fmt.Errorf("%w: a replaced object could not be told from the one opened; "+
			"the daemon's --object-allow-unversioned reads such objects anyway, pinned by their size alone", ErrUnversioned)}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if o := s.objects[url]; o != nil && o.ver.same(v) {
		o.refs++
		return o, nil
	}
	if err := s.roomToMapLocked(url, v.size); err != nil {
		return nil, err
	}
	o, err := s.newObject(loc, v)
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
func (s *Store) newObject(loc Location, v version) (*Object, error) {
	o := &Object{store: s, loc: loc, url: loc.String(), size: v.size, ver: v, refs: 1, runs: map[int]*run{}}
	if v.size == 0 {
		return o, nil
	}
	var err error
	switch {
	case s.opts.Dir == "":
		var fd int
		fd, err = unix.MemfdCreate("dataloaderd-object", unix.MFD_CLOEXEC)
		if err == nil {
			o.file = os.NewFile(uintptr(fd), loc.String())
		}
	case !v.unversioned() && !s.disk.inUse(o.url, v):
		err = s.openEntryLocked(o) // kept across restarts
	default: // a replacement could not be told, or the entry is in use: not kept
		o.file, err = os.CreateTemp(s.opts.Dir, "object-*")
		if err == nil {
			err = os.Remove(o.file.Name())
		}
	}
	if err == nil {
		err = o.file.Truncate(v.size)
	}
	if err == nil {
		o.data, err = mapAligned(int(o.file.Fd()), 0, v.size) // extents.go
	}
	if err != nil {
		if o.file != nil {
			o.file.Close()
		}
		o.closeEntry()
		if o.entry != "" {
			delete(s.disk.live, o.entry)
		}
		return nil, fmt.Errorf("%w: %s: backing of %d bytes: %w", ErrObject, o.url, v.size, err)
	}
	s.mapped += v.size
	mapped.Register(o.data, o.url)
	s.restoreLocked(o)
	return o, nil
}

// roomToMapLocked makes sure an object of size bytes may be mapped beside
// those mapped already, within MaxMappedBytes: objects no session reads
// are dropped from the cache to make room; past that it is refused.
func (s *Store) roomToMapLocked(url string, size int64) error {
	bound := s.opts.MaxMappedBytes
	if s.mapped+size <= bound {
		return nil
	}
	for _, o := range s.objects {
		if o.refs == 0 && len(o.runs) == 0 { // no session reads it, no fetch writes it
			s.dropLocked(o)
		}
	}
	if s.mapped+size <= bound {
		return nil
	}
	return fmt.Errorf("%w: %w: %s: its %d bytes beside the %d of the objects open would map more than %d bytes at once",
		ErrObject, ErrBudget, url, size, s.mapped, bound)
}

// dropLocked forgets an object no session reads any more: its present
// blocks leave the budget and its memory is freed.
func (s *Store) dropLocked(o *Object) {
	var kept int64 // whole on disk
	o.blocks.each(func(i int, b *block) {
		o.setAheadLocked(i, false)
		s.unlinkLocked(b)
		if b.state != absent {
			s.used -= o.blockLen(i)
		}
		if b.state == present || b.state == stored {
			kept += o.blockLen(i)
		}
		b.state = absent
	})
	o.blocks.tidyAll()
	o.present = 0
	s.used += s.releaseEntryLocked(o, kept)
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
		if s.disk != nil && len(s.disk.cold) > 0 { // used before anything open
			s.used -= s.disk.evictOldest()
			continue
		}
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
