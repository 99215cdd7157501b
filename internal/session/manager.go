// Package session is the lifecycle of dataloaderd's sessions: one per
// (job, data-parallel rank), read by the consumers of one tensor or
// pipeline-parallel group. A Manager opens a session (or joins a consumer to
// it), attaches each consumer's batch stream as a Feed, applies releases,
// gives and saves the rank's state, reclaims sessions whose consumers went
// away, and shares the opened corpora between the sessions of one config.
//
// It knows nothing of gRPC: internal/server translates the wire into
// Requests and Feeds and maps this package's errors to status codes.
package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/dataloaderd/dataloaderd/internal/cuda"
	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/ring"
	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// Defaults of Config fields left zero, and the largest ring.
const (
	DefaultSlots        = 8
	MaxSlots            = 256
	DefaultAttachWithin = time.Minute
	// DefaultKeepDetached is main's KeepDetached: how long a dead
	// process's session waits for a new one (a restarted rank).
	DefaultKeepDetached = 5 * time.Minute
	DefaultShmDir       = "/dev/shm"
)

// Config is what a Manager is built from; main fills it from flags.
type Config struct {
	Logger   *zap.Logger
	Registry prometheus.Registerer
	// AllowRoots confines dataset, resume and save paths; empty: no confinement.
	AllowRoots []string
	// Objects reads s3:// datasets through the node's cache; nil: off.
	Objects *objstore.Store
	// RequireWorkingSet refuses an open that would make the working set of
	// the sessions open larger than the object cache (workingset.go);
	// false: such an open is logged as a warning.
	RequireWorkingSet bool
	// ShmDir holds the shared-memory rings and control files.
	ShmDir string
	// ShmInstance names the files this daemon makes in ShmDir
	// (ring.FileName): the instance of its ring.Claim on the directory, so
	// that a daemon started after a crash sweeps them. Empty: files are
	// named by session alone.
	ShmInstance string
	// Slots is the ring size of sessions that do not ask for one.
	Slots int
	// AttachWithin is how long a joined consumer may take to open its batch
	// stream before its session is reclaimed.
	AttachWithin time.Duration
	// OpenCUDA opens the CUDA driver, on the first session asking for the
	// cuda transport; nil means cuda.OpenDriver("") (libcuda.so.1).
	OpenCUDA func() (cuda.Driver, error)
	// IdleLimit reclaims a session with an attached batch stream whose
	// consumers released no batch for that long; 0: never.
	IdleLimit time.Duration
	// MaxSessionsPerUser bounds the sessions one user may have open; 0: no
	// bound.
	MaxSessionsPerUser int
	// RingBudget bounds the host memory of all rings together, in bytes:
	// inline rings in the daemon, shm rings in the shm directory (cuda rings
	// are on GPUs). A session that would pass it is refused; 0: no bound.
	RingBudget int64
	// Resources are the tokenizers, workers and cache that text datasets
	// share; nil makes a default set (a worker per core, a 1 GiB cache).
	Resources *stream.Resources
	// StallLog: a consumer's wait for one batch this long or longer is
	// logged with its cause (stalls.go); 0: none is.
	StallLog time.Duration
	// KeepDetached keeps, this long, the session of a consumer whose
	// process died without closing it, for a new process to take its
	// place and go on where it left off (keep.go); 0: it is reclaimed at
	// once.
	KeepDetached time.Duration
}

// Manager holds every session of the daemon. Its methods are safe for
// concurrent use.
type Manager struct {
	cfg     Config
	log     *zap.Logger
	roots   *files.Roots
	metrics *metrics
	corpora *corpora
	// opens remembers the sessions served and bounds the lines opens log.
	opens   *openLedger
	devices func() (*cuda.Devices, error)

	mu       sync.Mutex
	sessions map[sessionKey]*session
	byID     map[string]*session
	// ringUsed is the ring memory reserved by open sessions and those
	// being made (RingBudget).
	ringUsed int64
	// opening holds a channel per key whose session is being made, closed
	// when it is made (or failed).
	opening map[sessionKey]chan struct{}
	// closing counts sessions dropped whose memory is still being freed.
	closing  int
	stopping bool
	// closedByConsumers holds the ids of the last sessions their consumers
	// closed, oldest first: a consumer's attach or close that arrives
	// after the session went (its own close raced it) is no failure.
	closedByConsumers []string
	// run tags the ids of the sessions this run of the daemon opens.
	run string
	// workingSet is what the open sessions need of the object cache
	// (workingset.go); guarded by mu.
	workingSet int64
	// published, when set (tests), runs after an open made its session
	// findable by others and before it replies.
	published func()
}

// closedMemory is how many closed session ids a Manager remembers.
const closedMemory = 1024

// New builds a Manager and registers its metrics.
func New(cfg Config) (*Manager, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.ShmDir == "" {
		cfg.ShmDir = DefaultShmDir
	}
	if cfg.Slots == 0 {
		cfg.Slots = DefaultSlots
	}
	if cfg.AttachWithin == 0 {
		cfg.AttachWithin = DefaultAttachWithin
	}
	if cfg.OpenCUDA == nil {
		cfg.OpenCUDA = func() (cuda.Driver, error) { return cuda.OpenDriver("") }
	}
	if cfg.Resources == nil {
		cfg.Resources = stream.NewResources(0, 1<<30, nil)
	}
	r, err := files.NewRoots(cfg.AllowRoots)
	if err != nil {
		return nil, err
	}
	r.WithObjects(cfg.Objects)
	// Every file a job names is opened through the roots (package files).
	cfg.Resources.Roots = r
	m := &Manager{
		cfg: cfg, log: cfg.Logger, roots: r, metrics: newMetrics(cfg.Registry),
		corpora: newCorpora(cfg.Resources), opens: newOpenLedger(),
		sessions: map[sessionKey]*session{}, byID: map[string]*session{}, opening: map[sessionKey]chan struct{}{},
		run: newRunTag(),
	}
	m.metrics.registerResources(cfg.Registry, cfg.Resources)
	cfg.Registry.MustRegister(newRankWaits(m))
	m.metrics.ringBudget.Set(float64(cfg.RingBudget))
	cfg.Resources.OnSkip = skipLogger(cfg.Logger, m.metrics)
	m.corpora.opened = wholeFileLogger(cfg.Logger)
	open := cfg.OpenCUDA
	m.devices = sync.OnceValues(func() (*cuda.Devices, error) {
		drv, err := open()
		if err != nil {
			return nil, err
		}
		return cuda.NewDevices(drv), nil
	})
	return m, nil
}

// Sessions is the number of sessions open, or closing and not yet freed.
func (m *Manager) Sessions() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessions) + m.closing
}

// Shutdown refuses new sessions, closes every open one (their feeds end
// with ErrClosed) and removes their rings.
func (m *Manager) Shutdown() {
	m.mu.Lock()
	m.stopping = true
	all := make([]*session, 0, len(m.sessions))
	for _, ss := range m.sessions {
		all = append(all, ss)
	}
	m.mu.Unlock()
	for _, ss := range all {
		m.drop(ss, "daemon shutting down")
	}
}

// Reap runs until ctx ends, reclaiming sessions whose consumers never
// attached a batch stream within AttachWithin, and, with an IdleLimit,
// attached sessions that released nothing for that long.
func (m *Manager) Reap(ctx context.Context) error {
	every := m.cfg.AttachWithin
	if idle := m.cfg.IdleLimit; idle > 0 && idle < every {
		every = idle
	}
	if keep := m.cfg.KeepDetached; keep > 0 && keep < every {
		every = keep
	}
	t := time.NewTicker(max(every/4, time.Millisecond)) // a nanosecond flag would make it 0, which panics
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case now := <-t.C:
			m.reapAt(now)
		}
	}
}

// reapAt drops the sessions stale or idle at now.
func (m *Manager) reapAt(now time.Time) {
	why := map[*session]string{}
	m.mu.Lock()
	for _, ss := range m.sessions {
		if m.cfg.KeepDetached > 0 {
			// A process that died after its open, before its stream
			// attached (a replacement crashing as it starts), leaves its
			// place kept, not a stale session to reclaim (keep.go).
			ss.settleDead(m.cfg.KeepDetached)
		}
		switch {
		case ss.stale(now, m.cfg.AttachWithin):
			why[ss] = "reclaimed: a consumer never attached its batch stream within --attach-within"
		case m.cfg.IdleLimit > 0 && ss.idle(now, m.cfg.IdleLimit):
			why[ss] = fmt.Sprintf("reclaimed: no batch released for %s (--idle-limit)", m.cfg.IdleLimit)
		case m.cfg.KeepDetached > 0 && ss.keptPast(now, m.cfg.KeepDetached):
			why[ss] = fmt.Sprintf("reclaimed: a consumer's process died without closing and no process took its place within %s (--keep-detached)", m.cfg.KeepDetached)
		}
	}
	m.mu.Unlock()
	for ss, w := range why {
		m.dropKept(ss, w, outcomeExpired) // keep.go; counts vacancies, if any
	}
}

// isStopping says whether Shutdown began.
func (m *Manager) isStopping() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stopping
}

// drop removes a session and frees everything it holds; dropping twice is
// harmless.
func (m *Manager) drop(ss *session, why string) {
	m.mu.Lock()
	if m.byID[ss.id] != ss {
		m.mu.Unlock()
		return
	}
	delete(m.byID, ss.id)
	delete(m.sessions, ss.key)
	m.closing++
	m.mu.Unlock()
	ss.droppedFor(why)
	ss.stop(m.metrics.clientWait)
	m.unreserve(ss.reserved)
	m.metrics.sessions.Dec()
	m.metrics.ringBytes.Sub(float64(ss.ring.Slots() * ss.ring.Stride()))
	m.metrics.readySlots.DeleteLabelValues(ss.labels()...)
	m.metrics.datasets.release(ss.datasetLabels)
	m.metrics.jobs.release(ss.jobSeries)
	m.mu.Lock()
	m.closing--
	m.mu.Unlock()
	if ok, more := m.opens.lineFields(ss.key.uid, ss.key.job); ok {
		ss.log.Info("session closed", append(more, zap.String("why", why))...)
	}
}

// lookup finds session id for user uid. Another user's session is not
// found, with the words of one that never existed: ids are not secrets
// (they appear in logs), ownership is what guards a session.
func (m *Manager) lookup(uid uint32, id string) (*session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ss := m.byID[id]
	switch {
	case ss != nil && ss.key.uid == uid:
		return ss, nil
	case ss != nil:
	case slices.Contains(m.closedByConsumers, id):
		return nil, fmt.Errorf("%w: session %q was %s", ErrSessionClosed, id, whyClosedByConsumers)
	case m.ofEarlierRun(id):
		return nil, fmt.Errorf("%w: session %q was opened by an earlier run of the daemon; open it again (a Loader does, with reconnect_timeout > 0)",
			ErrDaemonRestarted, id)
	}
	return nil, fmt.Errorf("%w: %q (closed, reclaimed, or never opened)", ErrNoSession, id)
}

// closedBy remembers that session id's consumers closed it.
func (m *Manager) closedBy(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.closedByConsumers) == closedMemory {
		m.closedByConsumers = slices.Delete(m.closedByConsumers, 0, 1)
	}
	m.closedByConsumers = append(m.closedByConsumers, id)
}

// CountError counts a failure in dataloaderd_errors_total under kind: the
// status code a client was given (the server counts those, but for the
// expected ends of streams, see Feed.Detach), or "producer" for a rank
// whose production failed.
func (m *Manager) CountError(kind string) { m.metrics.errors.WithLabelValues(kind).Inc() }

// Close marks a consumer of session id closed; the session goes once every
// joined consumer closed it. Closing a session its consumers closed is
// harmless.
func (m *Manager) Close(uid uint32, id string, consumer int) error {
	ss, err := m.lookup(uid, id)
	if errors.Is(err, ErrSessionClosed) {
		return nil
	}
	if err != nil {
		return err
	}
	last, err := ss.closeConsumer(uint32(consumer))
	if err != nil {
		return err
	}
	if last {
		m.closedBy(id)
		m.drop(ss, whyClosedByConsumers)
	}
	return nil
}

// hooks follow a session's producer: they count what it serves and, on a
// ring with a control block (shm, cuda), publish every batch and the end in
// it.
func (m *Manager) hooks(ss *session, lineTokens int) stream.Hooks {
	// The session's series, looked up once rather than per batch.
	ss.datasetLabels = m.metrics.datasets.acquire(ss.datasets)
	lines := make([]prometheus.Counter, len(ss.datasets))
	tokens := make([]prometheus.Counter, len(ss.datasets))
	for d, label := range ss.datasetLabels {
		lines[d] = m.metrics.lines.WithLabelValues(label)
		tokens[d] = m.metrics.tokens.WithLabelValues(label)
	}
	ready := m.metrics.readySlots.WithLabelValues(ss.labels()...)
	ss.jobSeries = m.metrics.jobs.acquire(ss.labels()[0], ss.key.job, ss.datasetLabels)
	job := ss.jobSeries
	ctl := ss.ctl
	h := stream.Hooks{
		Produced: func(b stream.Batch) {
			if ctl != nil {
				ctl.Publish(b.Step, b.Slot, b.Lines, b.Segments, b.MaxSeqlen)
			}
			m.metrics.batches.Inc()
			m.metrics.countSkipped(b, lineTokens)
			for d, n := range b.DatasetLines {
				if n > 0 {
					lines[d].Add(float64(n))
					tokens[d].Add(float64(n * lineTokens))
					job.lines[d].Add(float64(n))
				}
			}
			var sum float64
			for _, w := range b.Weights {
				sum += w
			}
			for d, w := range b.Weights {
				job.share[d].Set(w / sum)
			}
			ready.Set(float64(ss.pipeline.Ready(0)))
		},
	}
	if ctl != nil {
		h.Remade = ctl.Unpublish
		h.Finished = func(step uint64, err error) {
			if err != nil {
				ctl.Finish(ring.StateFailed, step)
			} else {
				ctl.Finish(ring.StateEnded, step)
			}
		}
		h.SlotWait = ctl.SetProducerWaiting
	}
	return h
}
