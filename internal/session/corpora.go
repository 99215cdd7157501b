package session

import (
	"encoding/json"
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
	ready  chan struct{} // closed once opening finished
	err    error
}

func newCorpora(res *stream.Resources) *corpora {
	return &corpora{res: res, open: map[string]*sharedCorpus{}}
}

// acquire returns the corpus of cfg, opening it if no session holds it.
// Corpora are shared by the whole config: a job's ranks ask for the same.
func (c *corpora) acquire(cfg stream.Config) (*stream.Corpus, func(), error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	key := string(b)
	c.mu.Lock()
	sc := c.open[key]
	if sc == nil {
		sc = &sharedCorpus{ready: make(chan struct{})}
		c.open[key] = sc
		sc.refs++
		c.mu.Unlock()
		sc.corpus, sc.err = stream.OpenCorpusWith(cfg, c.res)
		if sc.err == nil && c.opened != nil {
			c.opened(sc.corpus)
		}
		close(sc.ready)
	} else {
		sc.refs++
		c.mu.Unlock()
		<-sc.ready
	}
	release := func() {
		c.mu.Lock()
		sc.refs--
		last := sc.refs == 0
		if last {
			delete(c.open, key)
		}
		c.mu.Unlock()
		if last && sc.corpus != nil {
			sc.corpus.Close()
		}
	}
	if sc.err != nil {
		release()
		return nil, nil, sc.err
	}
	return sc.corpus, release, nil
}
