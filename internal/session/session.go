package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/dataloaderd/dataloaderd/internal/mapped"
	"github.com/dataloaderd/dataloaderd/internal/ring"
	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// sessionKey is what a session is unique by.
type sessionKey struct {
	uid    uint32 // of the process that opened it: jobs are per user
	job    string
	dpRank uint32
}

// session is one data-parallel rank of one job: its corpus, its pipeline
// running ahead into a ring, and the consumers (processes of one tensor or
// pipeline-parallel group) that read every batch of it.
type session struct {
	id        string
	key       sessionKey
	groupKey  string
	transport Transport
	corpus    *stream.Corpus
	// releaseCorpus gives the shared corpus back; leaveCorpus, before it,
	// ends its reads in object storage when no other session reads it.
	releaseCorpus func()
	leaveCorpus   func()
	pipeline      *stream.Pipeline
	ring          ring.Ring
	// ctl is the ring's control block (shm, cuda); nil when batches go by
	// messages only (inline, or a cuda ring without a control file).
	ctl      *ring.Control
	datasets []string
	// datasetLabels are the label values of datasets in the metrics,
	// held from the producer's start to the session's drop.
	datasetLabels []string
	// jobSeries are its job's mixture series.
	jobSeries jobHandles
	// waits accounts for its consumers' waits and their causes (stalls.go).
	waits *waitMeter
	// reserved is the ring budget the session holds (Manager.ringUsed).
	reserved int64
	// active is when a consumer last attached or released a batch, in
	// Unix nanoseconds (IdleLimit).
	active atomic.Int64
	cancel context.CancelFunc
	done   chan struct{} // closed when the producer has stopped
	log    *zap.Logger
	// reconnected: the session was opened by a counted reconnect, and so
	// are its consumers' joins (reconnects.go).
	reconnected bool

	// cont is what a new process must ask for to take the place of a
	// consumer whose process died (keep.go).
	cont continuity

	mu       sync.Mutex
	joined   int    // consumers that opened the session
	attached []bool // consumers with a live batch stream
	closed   []bool // consumers that closed the session
	opened   time.Time
	// vacant is, per consumer, when its process died without closing (its
	// place kept for a new process: keep.go); zero while it is not vacant.
	// rejoined is when a new process took the place (zero: never).
	vacant, rejoined []time.Time
	// leaving counts consumers whose stream ended without a close while the
	// daemon waits to see whether their process died; settled is closed
	// (and replaced) each time one is decided.
	leaving int
	settled chan struct{}
	// procs are the processes of the attached consumers, where followed
	// (Feed.Follow).
	procs []*lifeline
	// dropped says why the session was dropped, once it was.
	dropped string
}

// droppedFor records why the session is being dropped.
func (s *session) droppedFor(why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropped = why
}

// goneErr is the error a consumer of a dropped session gets in place of the
// pipeline's ErrClosed: the session is not found any more, and why. Nil
// while the session is not dropped.
func (s *session) goneErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dropped == "" {
		return nil
	}
	return fmt.Errorf("%w: session %q was %s", ErrNoSession, s.id, s.dropped)
}

func newSessionID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// A session's id is its daemon run's tag (runTagLen hex digits, random for
// each run) and 16 random hex digits: a request naming a session that an
// earlier run of the daemon opened (the daemon restarted since) is told so,
// not that the session is unknown, and its client opens the session again.
const runTagLen = 8

// newRunTag is the tag of a run of the daemon (a Manager).
func newRunTag() string { return newSessionID()[:runTagLen] }

// newSessionID is the id of a session this run opens.
func (m *Manager) newSessionID() string { return m.run + newSessionID()[runTagLen:] }

// ofEarlierRun reports whether id has the form of a session id and another
// run's tag.
func (m *Manager) ofEarlierRun(id string) bool {
	if len(id) != 24 || id[:runTagLen] == m.run {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil
}

// join adds one consumer; it fails when all declared consumers are in.
func (s *session) join() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.joined == len(s.attached) {
		if len(s.attached) == 1 {
			return 0, s.duplicate()
		}
		return 0, fmt.Errorf("%w: job %q dp_rank %d declared %d consumers and all have joined",
			ErrTooMany, s.key.job, s.key.dpRank, len(s.attached))
	}
	s.joined++
	return s.joined - 1, nil
}

// duplicate is the error of a second open of a one-consumer session. Its
// likely causes: another job on the node uses the same job name, or the
// rank opened a second loader without closing the first.
func (s *session) duplicate() error {
	return fmt.Errorf("%w: job %q dp_rank %d is already open (duplicate session, opened %s ago). "+
		"Either another job on this node uses the same job name: give each job its own, with Loader(job=...) or "+
		"DATALOADERD_JOB (the client's default comes from TORCHELASTIC_RUN_ID unless it is \"none\", else from "+
		"MASTER_ADDR, MASTER_PORT and the launching process); or this process, or another of this job, opened the "+
		"same dp_rank twice: close the first loader before opening another. Only the processes of one "+
		"tensor/pipeline-parallel group share a session, and each of them declares consumers=<group size>",
		ErrSessionExists, s.key.job, s.key.dpRank, time.Since(s.opened).Round(time.Second))
}

// attach marks consumer c's batch stream live.
func (s *session) attach(c uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case int(c) >= s.joined:
		return fmt.Errorf("%w: consumer %d has not joined session %s", ErrBadRequest, c, s.id)
	case s.attached[c]:
		return fmt.Errorf("%w: consumer %d of session %s already has a batch stream", ErrSessionExists, c, s.id)
	case s.closed[c]:
		return fmt.Errorf("%w: consumer %d of session %s has closed", ErrNoSession, c, s.id)
	case !s.vacant[c].IsZero():
		return fmt.Errorf("%w: consumer %d of session %s: its process died; open the session again to take its place",
			ErrNoSession, c, s.id)
	}
	s.attached[c] = true
	s.touch()
	return nil
}

// touch records activity of a consumer.
func (s *session) touch() { s.active.Store(time.Now().UnixNano()) }

// idle says whether a consumer has an attached batch stream and none
// attached or released anything for d: a trainer stopped or hung, holding
// its ring. Sessions with no attached stream are stale's business.
func (s *session) idle(now time.Time, d time.Duration) bool {
	if now.Sub(time.Unix(0, s.active.Load())) < d {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.attached, true)
}

// closeConsumer marks consumer c closed and reports whether every joined
// consumer is now closed.
func (s *session) closeConsumer(c uint32) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if int(c) >= s.joined {
		return false, fmt.Errorf("%w: consumer %d has not joined session %s", ErrBadRequest, c, s.id)
	}
	s.closed[c] = true
	for i := 0; i < s.joined; i++ {
		if !s.closed[i] {
			return false, nil
		}
	}
	return true, nil
}

// stale reports whether some joined consumer never attached a batch stream
// within d of the session opening.
func (s *session) stale(now time.Time, d time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 0; i < s.joined; i++ {
		since := s.opened
		if s.rejoined[i].After(since) {
			since = s.rejoined[i] // a new process took the place of a dead one
		}
		if !s.attached[i] && !s.closed[i] && s.vacant[i].IsZero() && now.Sub(since) >= d {
			return true
		}
	}
	return false
}

// stop ends the producer, waits for it, tells control-block clients the
// session is closed, and frees the ring, its control block and the corpus.
func (s *session) stop(waits *waitHistogram) {
	s.unfollowOpeners() // keep.go
	s.pipeline.Close()
	s.cancel()
	s.leaveCorpus() // a producer waiting on object storage stops now
	<-s.done
	if s.ctl != nil {
		// A control block its client cut short faults: nobody reads it then.
		_ = mapped.Guard(func() error { s.ctl.MarkClosed(); return nil })
		s.ctl.WakeReleaseWatchers()
		waits.retire(s.ctl)
	}
	if err := s.ring.Close(); err != nil {
		s.log.Warn("closing ring", zap.Error(err))
	}
	s.releaseCorpus()
}

func (s *session) labels() []string {
	return []string{strconv.FormatUint(uint64(s.key.uid), 10), labelValue(s.key.job), strconv.FormatUint(uint64(s.key.dpRank), 10)}
}
