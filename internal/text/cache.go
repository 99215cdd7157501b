package text

import (
	"container/list"
	"fmt"
	"sync"
)

// Cache holds tokenized units, least recently used first out, up to a bound
// on their token bytes (4 per token of capacity). It may be shared by many
// datasets. Each unit is tokenized once however many goroutines ask for it at
// the same time (the first tokenizes, the others wait for it). A unit larger
// than the bound is still kept, alone, so that the reads of it do not each
// tokenize it again: memory is at most max(bound, largest unit), plus units
// being tokenized and units evicted while a reader still copies from them.
type Cache struct {
	mu      sync.Mutex
	max     int64
	used    int64
	lru     list.List // of *cacheEntry, most recent first; finished entries only
	entries map[cacheKey]*cacheEntry

	hits, misses uint64
}

type cacheKey struct{ source, unit uint64 }

type cacheEntry struct {
	key    cacheKey
	done   chan struct{} // closed when tokens and err are set
	tokens []int32
	err    error
	elem   *list.Element // nil while tokenizing
}

// NewCache returns an empty cache bounded to maxBytes of tokens.
func NewCache(maxBytes int64) *Cache {
	return &Cache{max: maxBytes, entries: make(map[cacheKey]*cacheEntry)}
}

// CacheStats is a snapshot of a cache's counters, for metrics.
type CacheStats struct {
	Bytes, MaxBytes int64
	Units           int
	Hits, Misses    uint64
}

// Stats returns the cache's counters.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{Bytes: c.used, MaxBytes: c.max, Units: c.lru.Len(), Hits: c.hits, Misses: c.misses}
}

func (c *Cache) has(key cacheKey) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.entries[key]
	return ok
}

// get returns key's tokens, calling fill to make them when no one has or is.
// Errors are returned to everyone waiting on that fill, and not kept.
func (c *Cache) get(key cacheKey, fill func() ([]int32, error)) ([]int32, error) {
	c.mu.Lock()
	if e, ok := c.entries[key]; ok {
		if e.elem != nil {
			c.lru.MoveToFront(e.elem)
		}
		c.hits++
		c.mu.Unlock()
		<-e.done
		return e.tokens, e.err
	}
	c.misses++
	e := &cacheEntry{key: key, done: make(chan struct{})}
	c.entries[key] = e
	c.mu.Unlock()

	tokens, err := fillSafely(fill)

	c.mu.Lock()
	e.tokens, e.err = tokens, err
	if err != nil {
		delete(c.entries, key)
	} else {
		e.elem = c.lru.PushFront(e)
		c.used += entryBytes(e)
		for c.used > c.max && c.lru.Back() != e.elem {
			c.remove(c.lru.Back().Value.(*cacheEntry))
		}
	}
	c.mu.Unlock()
	close(e.done)
	return tokens, err
}

// fillSafely turns a panic of fill (of the encoder) into an error, so that
// readers waiting on the entry are released.
func fillSafely(fill func() ([]int32, error)) (tokens []int32, err error) {
	defer func() {
		if r := recover(); r != nil {
			tokens, err = nil, fmt.Errorf("text: tokenizing panicked: %v", r)
		}
	}()
	return fill()
}

func entryBytes(e *cacheEntry) int64 { return int64(cap(e.tokens)) * 4 }

// remove drops a finished entry; c.mu is held.
func (c *Cache) remove(e *cacheEntry) {
	c.lru.Remove(e.elem)
	delete(c.entries, e.key)
	c.used -= entryBytes(e)
}

// drop removes every finished entry of one source.
func (c *Cache) drop(source uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for el := c.lru.Front(); el != nil; {
		next := el.Next()
		if e := el.Value.(*cacheEntry); e.key.source == source {
			c.remove(e)
		}
		el = next
	}
}
