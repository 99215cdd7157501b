package text

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/dataloaderd/dataloaderd/internal/mapped"
	"github.com/dataloaderd/dataloaderd/internal/source"
)

// Encoder turns text into token ids. Encode appends text's tokens to dst and
// returns the extended slice, like append. It must be a pure function of text
// (the same tokens on every call, whatever the goroutine or timing) and safe
// for concurrent use: exactness across runs rests on it.
type Encoder interface {
	Encode(dst []int32, text []byte) []int32
}

// Framing is how a tokenized unit separates its documents: each document is
// an optional BOS, its tokens, and EOS (left out when its last token already
// is EOS, as the stream does for other formats).
type Framing struct {
	BOS, EOS int32
	HasBOS   bool
}

// BytesPerToken is the ratio Tokens and Offset assume to estimate token
// counts from bytes before anything is tokenized.
const BytesPerToken = 4

// sourceIDs numbers Tokens instances, to key them apart in a shared Cache.
var sourceIDs atomic.Uint64

// Tokens is a text Dataset tokenized on the fly, as a source.Source whose
// units are the dataset's units, each its documents' framed tokens
// concatenated, so it is Delimited.
//
// UnitLen and Read are exact and deterministic: they tokenize the unit on
// first use and keep its tokens in the Cache. Tokens and Offset are only
// estimates from byte sizes (Bytes/BytesPerToken), used to cut shards of
// about equal size; no promise (exactly once, determinism) depends on them,
// only on UnitLen and Read.
type Tokens struct {
	ds    Dataset
	enc   Encoder
	frame Framing
	cache *Cache
	pool  *Pool
	id    uint64

	// life is held for reading while a unit is read from ds, and for
	// writing by Close, so that a worker still tokenizing a unit of a closed
	// dataset never touches its unmapped files.
	life   sync.RWMutex
	closed bool
}

var _ source.Source = (*Tokens)(nil)

// Tokenized returns ds tokenized by enc. It takes ownership of ds (Close
// closes it). cache bounds the memory of tokenized units and pool runs
// Prefetch; both may be shared by every dataset of the daemon, and pool may
// be nil when nothing is prefetched.
func Tokenized(ds Dataset, enc Encoder, frame Framing, cache *Cache, pool *Pool) *Tokens {
	return &Tokens{ds: ds, enc: enc, frame: frame, cache: cache, pool: pool, id: sourceIDs.Add(1)}
}

// Units is the number of units of the text dataset.
func (t *Tokens) Units() uint64 { return t.ds.Units() }

// Tokens is an estimate: the dataset's bytes / BytesPerToken, rounded up.
func (t *Tokens) Tokens() uint64 { return t.estimate(t.ds.Bytes()) }

// Offset is an estimate from unit u's byte offset; monotone, and
// Offset(Units()) == Tokens().
func (t *Tokens) Offset(u uint64) uint64 { return t.estimate(t.ds.Offset(u)) }

func (t *Tokens) estimate(bytes uint64) uint64 {
	return bytes/BytesPerToken + min(bytes%BytesPerToken, 1)
}

// Delimited is true: units carry their documents' separators.
func (t *Tokens) Delimited() bool { return true }

// Files lists the dataset's files.
func (t *Tokens) Files() []source.File { return t.ds.Files() }

// Skipped is the dataset's count of skipped bad records.
func (t *Tokens) Skipped() uint64 { return t.ds.Skipped() }

// Groups is the dataset's runs of units best read in order, one after the
// other (see Dataset.Groups): a reader that permutes units should keep each
// run together.
func (t *Tokens) Groups(lo, hi uint64) [][2]uint64 { return t.ds.Groups(lo, hi) }

// Compressed describes the dataset's compressed JSONL files.
func (t *Tokens) Compressed() CompressedStats { return t.ds.Compressed() }

// UnitLen is the exact number of tokens of unit u, tokenizing it if needed.
func (t *Tokens) UnitLen(u uint64) (uint64, error) {
	tokens, err := t.unit(u)
	return uint64(len(tokens)), err
}

// Read copies tokens [off, off+len(dst)) of unit u into dst.
func (t *Tokens) Read(u uint64, off uint64, dst []int32) error {
	tokens, err := t.unit(u)
	if err != nil {
		return err
	}
	n := uint64(len(tokens))
	if off > n || uint64(len(dst)) > n-off {
		return fmt.Errorf("text: unit %d: read of %d tokens at offset %d past its %d tokens", u, len(dst), off, n)
	}
	copy(dst, tokens[off:])
	return nil
}

// Prefetch asks the pool to tokenize units ahead of their reads, and returns
// how many it queued. It never blocks: units already cached or being
// tokenized are passed over, and so are units beyond the pool's free queue
// slots. A unit tokenized by a worker and asked for by a reader at the same
// time is tokenized once, and its tokens do not depend on which got there
// first. Prefetch no more units than the cache holds, or they evict each
// other.
func (t *Tokens) Prefetch(units []uint64) int {
	if t.pool == nil {
		return 0
	}
	queued := 0
	for _, u := range units {
		if u >= t.Units() || t.cache.has(cacheKey{t.id, u}) {
			continue
		}
		if !t.pool.try(func() { _, _ = t.unit(u) }) {
			break
		}
		queued++
	}
	return queued
}

// Close waits for the units being tokenized, drops the dataset's cached
// units and closes the dataset. Reads after Close fail; prefetches are
// ignored.
func (t *Tokens) Close() error {
	t.life.Lock()
	if t.closed {
		t.life.Unlock()
		return nil
	}
	t.closed = true
	t.life.Unlock()
	t.cache.drop(t.id)
	return t.ds.Close()
}

// errClosed is the error of a read after Close.
var errClosed = errors.New("text: dataset closed")

// unit returns unit u's tokens, from the cache or by tokenizing it.
func (t *Tokens) unit(u uint64) ([]int32, error) {
	if u >= t.Units() {
		return nil, fmt.Errorf("text: unit %d out of range [0, %d)", u, t.Units())
	}
	t.life.RLock()
	closed := t.closed
	t.life.RUnlock()
	if closed {
		// A unit a worker finished as Close ran may still sit in the cache
		// (its tokens are plain memory; the LRU evicts it): not served.
		return nil, errClosed
	}
	return t.cache.get(cacheKey{t.id, u}, func() ([]int32, error) { return t.tokenize(u) })
}

// tokenize frames and tokenizes unit u's documents. Their bytes are read
// from mapped files: a file cut short under its mapping is an error of this
// unit, naming the file, not a crash of the daemon.
func (t *Tokens) tokenize(u uint64) (out []int32, err error) {
	err = mapped.Guard(func() error {
		var terr error
		out, terr = t.tokenizeMapped(u)
		return terr
	})
	return out, err
}

func (t *Tokens) tokenizeMapped(u uint64) ([]int32, error) {
	t.life.RLock()
	defer t.life.RUnlock()
	if t.closed {
		return nil, errClosed
	}
	var out []int32
	err := t.ds.Docs(u, func(text []byte) error {
		if t.frame.HasBOS {
			out = append(out, t.frame.BOS)
		}
		start := len(out)
		out = t.enc.Encode(out, text)
		if len(out) == start || out[len(out)-1] != t.frame.EOS {
			out = append(out, t.frame.EOS)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if cap(out)-len(out) > len(out)/8 {
		out = append([]int32(nil), out...) // the cache counts capacity
	}
	return out, nil
}

// Pool is a fixed set of workers shared by every tokenized dataset, with a
// bounded queue: Prefetch drops work rather than queue without bound.
type Pool struct {
	mu     sync.RWMutex
	work   chan func()
	closed bool
	wg     sync.WaitGroup
}

// NewPool starts workers goroutines (at least 1; the machine's core count is
// the natural choice) with a queue of 4 per worker.
func NewPool(workers int) *Pool {
	workers = max(workers, 1)
	p := &Pool{work: make(chan func(), 4*workers)}
	for range workers {
		p.wg.Go(func() {
			for job := range p.work {
				job()
			}
		})
	}
	return p
}

// try queues job unless the queue is full or the pool closed.
func (p *Pool) try(job func()) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return false
	}
	select {
	case p.work <- job:
		return true
	default:
		return false
	}
}

// Close lets queued work finish and stops the workers.
func (p *Pool) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.work)
	}
	p.mu.Unlock()
	p.wg.Wait()
}
