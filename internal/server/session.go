package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/dataloaderd/dataloaderd/internal/cuda"
	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/state"
	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// sessionKey is what a session is unique by.
type sessionKey struct {
	job    string
	dpRank uint32
}

// session is one data-parallel rank of one job: its corpus, its pipeline
// running ahead into a ring, and the consumers (processes of one tensor or
// pipeline-parallel group) that read every batch of it.
type session struct {
	id        string
	key       sessionKey
	dpSize    uint32
	configKey string
	transport string
	corpus    *stream.Corpus
	// releaseCorpus gives the shared corpus back.
	releaseCorpus func()
	pipeline      *stream.Pipeline
	ring          cuda.Ring
	// ctl is the ring's control block: in the ring file (shm) or in ctlFile
	// (cuda); nil for inline.
	ctl      *cuda.Control
	ctlFile  *cuda.ControlFile
	datasets []string
	cancel   context.CancelFunc
	done     chan struct{} // closed when the producer has stopped
	log      *zap.Logger

	mu       sync.Mutex
	joined   int    // consumers that opened the session
	attached []bool // consumers with a live batch stream
	closed   []bool // consumers that closed the session
	opened   time.Time
}

func newSessionID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// join adds one consumer; it fails when all declared consumers are in.
func (s *session) join() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.joined == len(s.attached) {
		if len(s.attached) == 1 {
			return 0, fmt.Errorf("%w: job %q dp_rank %d is already open (duplicate session); close it first or declare consumers > 1 for a tensor/pipeline-parallel group",
				errSessionExists, s.key.job, s.key.dpRank)
		}
		return 0, fmt.Errorf("%w: job %q dp_rank %d declared %d consumers and all have joined",
			errTooMany, s.key.job, s.key.dpRank, len(s.attached))
	}
	s.joined++
	return s.joined - 1, nil
}

// attach marks consumer c's batch stream live.
func (s *session) attach(c uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case int(c) >= s.joined:
		return fmt.Errorf("%w: consumer %d has not joined session %s", errBadRequest, c, s.id)
	case s.attached[c]:
		return fmt.Errorf("%w: consumer %d of session %s already has a batch stream", errSessionExists, c, s.id)
	case s.closed[c]:
		return fmt.Errorf("%w: consumer %d of session %s has closed", errNoSession, c, s.id)
	}
	s.attached[c] = true
	return nil
}

// closeConsumer marks consumer c closed and reports whether every joined
// consumer is now closed.
func (s *session) closeConsumer(c uint32) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if int(c) >= s.joined {
		return false, fmt.Errorf("%w: consumer %d has not joined session %s", errBadRequest, c, s.id)
	}
	s.closed[c] = true
	for i := 0; i < s.joined; i++ {
		if !s.closed[i] {
			return false, nil
		}
	}
	return true, nil
}

// unattachedSince reports whether some joined consumer never attached a
// batch stream within d of the session opening.
func (s *session) stale(now time.Time, d time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.opened) < d {
		return false
	}
	for i := 0; i < s.joined; i++ {
		if !s.attached[i] && !s.closed[i] {
			return true
		}
	}
	return false
}

// stop ends the producer, waits for it, tells control-block clients the
// session is closed, and frees the ring, its control block and the corpus.
func (s *session) stop(waits *waitHistogram) {
	s.pipeline.Close()
	s.cancel()
	<-s.done
	if s.ctl != nil {
		s.ctl.MarkClosed()
		s.ctl.WakeReleaseWatchers()
		waits.retire(s.ctl)
	}
	if err := s.ring.Close(); err != nil {
		s.log.Warn("closing ring", zap.Error(err))
	}
	if s.ctlFile != nil {
		if err := s.ctlFile.Close(); err != nil {
			s.log.Warn("closing control block", zap.Error(err))
		}
	}
	s.releaseCorpus()
}

// controlPath is the file holding the session's control block; "" for inline.
func (s *session) controlPath() string {
	switch {
	case s.ctlFile != nil:
		return s.ctlFile.Path()
	case s.ctl != nil:
		return s.ring.Path()
	}
	return ""
}

// controlBytes is how much of controlPath clients map.
func (s *session) controlBytes() uint64 {
	switch {
	case s.ctlFile != nil:
		return uint64(s.ctlFile.Size())
	case s.ctl != nil:
		return dataOffset(s.ring) // the shm ring's own block, before its slots
	}
	return 0
}

func (s *session) labels() []string {
	return []string{s.key.job, strconv.FormatUint(uint64(s.key.dpRank), 10)}
}

// restore builds the state a session resumes from, if any.
func restore(fp state.Fingerprint, roots *files.Roots, folder string, blobs [][]byte) (*state.Restored, error) {
	var names []string
	switch {
	case folder != "":
		f, err := roots.Folder("resume_from", folder)
		if err != nil {
			return nil, err
		}
		blobs, names, err = state.ReadFolder(f)
		if err != nil {
			return nil, err
		}
	case len(blobs) > 0:
		for i := range blobs {
			names = append(names, fmt.Sprintf("resume_states[%d]", i))
		}
	default:
		return nil, nil
	}
	return state.Merge(fp, names, blobs)
}
