package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// corpora shares opened corpora between the sessions of one job config: the
// ranks of a node map each file once, not once per rank (parallel file
// systems limit mmaps). A corpus is read-only once open; it is closed when
// its last session ends.
type corpora struct {
	res *stream.Resources
	// opened, when set, is called once with each corpus opened.
	opened func(*stream.Corpus)
	mu     sync.Mutex
	open   map[string]*sharedCorpus
}

type sharedCorpus struct {
	corpus *stream.Corpus
	refs   int
	// readers are the uses that have not left: when none is left, the
	// corpus's reads end and new sessions get a corpus of their own.
	readers int
	ready   chan struct{} // closed once opening finished
	err     error
}

// corpusUse is one session's use of a shared corpus: leave when its
// producer stops (the corpus's reads in object storage end if no other
// session reads it), release once the producer is done (the last closes it).
type corpusUse struct {
	c          *corpora
	key        string
	sc         *sharedCorpus
	left, gone bool // guarded by c.mu
}

func newCorpora(res *stream.Resources) *corpora {
	return &corpora{res: res, open: map[string]*sharedCorpus{}}
}

// acquire returns the corpus of a checked config, opening it if no session
// holds it.
// Corpora are shared by the whole config: a job's ranks ask for the same.
// It fails with ctx's error when ctx ends first, whether this call opens
// the corpus or waits for another's opening; an opening that another
// caller's context ended is made again for this one.
func (c *corpora) acquire(ctx context.Context, checked stream.Checked) (*stream.Corpus, *corpusUse, error) {
	b, err := json.Marshal(checked.Config())
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	key := string(b)
	for {
		c.mu.Lock()
		sc := c.open[key]
		opener := sc == nil
		if opener {
			sc = &sharedCorpus{ready: make(chan struct{})}
			c.open[key] = sc
		}
		sc.refs++
		sc.readers++
		c.mu.Unlock()
		use := &corpusUse{c: c, key: key, sc: sc}
		if opener {
			corpus, err := stream.OpenChecked(ctx, checked, c.res)
			c.mu.Lock()
			sc.corpus, sc.err = corpus, err
			if err != nil && c.open[key] == sc {
				delete(c.open, key) // callers from now on open it again
			}
			c.mu.Unlock()
			if err == nil && c.opened != nil {
				c.opened(corpus)
			}
			close(sc.ready)
		} else {
			select {
			case <-sc.ready:
			case <-ctx.Done():
				use.release()
				return nil, nil, ctx.Err()
			}
		}
		if sc.err != nil {
			use.release()
			if !opener && ctx.Err() == nil && ended(sc.err) {
				continue // the opener went: open it for this caller
			}
			return nil, nil, sc.err
		}
		return sc.corpus, use, nil
	}
}

// ended reports whether err is that of a context that ended.
func ended(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// leave says the session no longer reads the corpus: when no other session
// does, its reads of objects in flight end (the producer stops sooner) and
// sessions opened from now on get a corpus of their own.
func (u *corpusUse) leave() {
	c := u.c
	c.mu.Lock()
	if u.left {
		c.mu.Unlock()
		return
	}
	u.left = true
	u.sc.readers--
	last := u.sc.readers == 0
	if last && c.open[u.key] == u.sc {
		delete(c.open, u.key)
	}
	corpus := u.sc.corpus
	c.mu.Unlock()
	if last && corpus != nil {
		corpus.StopReads()
	}
}

// release gives the corpus back (leaving it first); the last release closes
// it.
func (u *corpusUse) release() {
	u.leave()
	c := u.c
	c.mu.Lock()
	if u.gone {
		c.mu.Unlock()
		return
	}
	u.gone = true
	u.sc.refs--
	last := u.sc.refs == 0
	if last && c.open[u.key] == u.sc {
		delete(c.open, u.key)
	}
	corpus := u.sc.corpus
	c.mu.Unlock()
	if last && corpus != nil {
		corpus.Close()
	}
}
