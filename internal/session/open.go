package session

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/state"
	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// tokenBytes is the size of a token in a slot: batches are little-endian
// int32 tokens.
const tokenBytes = 4

// Open opens the session of req's (job, data-parallel rank), or joins the
// consumer to it when it is open: the processes of a tensor or
// pipeline-parallel group start together, so while one of them makes the
// session the others wait for it and then join.
func (m *Manager) Open(ctx context.Context, req Request) (Opened, error) {
	o, err := m.open(ctx, req)
	m.logOpen(req, o, err) // and counts a reconnect (reconnects.go)
	if err == nil {
		m.followOpener(o, req.PID) // keep.go
	}
	return o, err
}

func (m *Manager) open(ctx context.Context, req Request) (Opened, error) {
	p, err := newPlan(req, m.cfg.Slots) // plan.go
	if err != nil {
		return Opened{}, err
	}
	req, group, need := p.req, p.group, p.ringBytes
	key := sessionKey{uid: req.UID, job: req.Job, dpRank: req.DPRank}
	m.mu.Lock()
	for {
		if m.stopping {
			m.mu.Unlock()
			return Opened{}, ErrShuttingDown
		}
		if ss := m.sessions[key]; ss != nil {
			m.mu.Unlock()
			// A session kept for a consumer whose process died (keep.go).
			if o, next, err := m.openKept(ctx, ss, req); next != joinIt {
				if next == openedIt {
					return o, err
				}
				m.mu.Lock()
				continue
			}
			if req.reconnecting() && ss.pipeline.StartStep() > req.ReconnectStep {
				return Opened{}, fmt.Errorf("%w: job %q dp_rank %d was reopened at step %d, after this consumer's last step %d: its group's consumers were more than a kept state apart",
					ErrConfigDiffers, req.Job, req.DPRank, ss.pipeline.StartStep(), req.ReconnectStep)
			}
			o, err := m.join(ss, group, req.Device)
			o.reconnect = ss.reconnected
			return o, err
		}
		made := m.opening[key]
		if made == nil {
			break
		}
		m.mu.Unlock()
		select {
		case <-made:
		case <-ctx.Done():
			return Opened{}, ctx.Err()
		}
		m.mu.Lock()
	}
	if err := m.checkUserLocked(req.UID); err != nil {
		m.mu.Unlock()
		return Opened{}, err
	}
	if err := m.reserveLocked(need); err != nil {
		m.mu.Unlock()
		return Opened{}, err
	}
	made := make(chan struct{})
	m.opening[key] = made
	m.mu.Unlock()

	ss, err := m.newSession(ctx, key, p)
	c := 0
	if err == nil {
		// The opener is the session's first consumer before any other open
		// can find it (a second open of a one-consumer rank that came in
		// between was let in as consumer 0, and so was this one).
		if c, err = ss.join(); err != nil {
			ss.stop(m.metrics.clientWait)
		}
	}
	m.mu.Lock()
	delete(m.opening, key)
	close(made)
	if err != nil {
		m.ringUsed -= need
		m.mu.Unlock()
		return Opened{}, err
	}
	ss.reserved = need
	if m.stopping {
		m.ringUsed -= need
		m.mu.Unlock()
		ss.stop(m.metrics.clientWait)
		return Opened{}, ErrShuttingDown
	}
	// A reconnect is counted when no session of its key was served here
	// before: one that was cannot have been on the daemon before this one.
	ss.reconnected = m.opens.served(key) && req.ReconnectedAfter > 0
	m.sessions[key] = ss
	m.byID[ss.id] = ss
	m.mu.Unlock()
	return m.announce(ss, req, c), nil
}

// announce counts and logs a session just published, and tells its
// opener, consumer c, what it opened.
func (m *Manager) announce(ss *session, req Request, c int) Opened {
	m.metrics.sessions.Inc()
	m.metrics.ringBytes.Add(float64(ss.ring.Slots() * ss.ring.Stride()))
	if m.published != nil {
		m.published()
	}
	if ok, more := m.opens.lineFields(ss.key.uid, ss.key.job); ok {
		ss.log.Info("session opened", append(more, zap.Uint32("dp_size", req.DPSize), zap.Int("consumers", req.Consumers),
			zap.Stringer("transport", ss.transport), zap.Uint64("start_step", ss.pipeline.StartStep()))...)
	}
	o := ss.describe(c, req.Device)
	o.reconnect = ss.reconnected
	return o
}

// join adds a consumer to an open session, after checking that it asks for
// what the session's other consumers asked for.
func (m *Manager) join(ss *session, group string, device int) (Opened, error) {
	if len(ss.attached) > 1 && ss.groupKey != group {
		return Opened{}, fmt.Errorf("%w: job %q dp_rank %d is open with another config, dp_size, consumer count, transport or resume point",
			ErrConfigDiffers, ss.key.job, ss.key.dpRank)
	}
	c, err := ss.join()
	if err != nil {
		return Opened{}, err
	}
	// After the join, so a refused one allocates nothing. A consumer whose
	// GPU cannot be added never attaches: the session is reclaimed after
	// AttachWithin, as for one that died.
	added, err := ss.ring.AddReader(device)
	if err != nil {
		return Opened{}, fmt.Errorf("job %q dp_rank %d: %w", ss.key.job, ss.key.dpRank, err)
	}
	if added {
		ss.log.Info("ring extended to another GPU", zap.Int("device", device))
	}
	return ss.describe(c, device), nil
}

// stopped is ErrShuttingDown once Shutdown began: the work of an open (a
// skip, a schedule's replay) then ends, and so does one whose ctx ended
// because the daemon is stopping.
func (m *Manager) stopped() error {
	if m.isStopping() {
		return ErrShuttingDown
	}
	return nil
}

// newSession opens (or shares) the corpus, restores the state to resume
// from, makes the ring and starts the producer, as the plan says.
func (m *Manager) newSession(ctx context.Context, key sessionKey, p plan) (*session, error) {
	req := p.req
	corpus, use, err := m.corpora.acquire(ctx, p.checked)
	if err != nil {
		if stop := m.stopped(); stop != nil && ctx.Err() != nil {
			return nil, stop
		}
		return nil, err
	}
	release := use.release
	from, err := resumeState(corpus, m.roots, req) // resume.go
	if err != nil {
		release()
		return nil, err
	}
	rank, warnings, err := rankFrom(ctx, corpus, req, from)
	for _, w := range warnings {
		m.log.Warn("skip_steps", zap.String("job", key.job), zap.Uint32("dp_rank", key.dpRank), zap.String("warning", w))
	}
	if err != nil {
		release()
		if stop := m.stopped(); stop != nil && ctx.Err() != nil {
			return nil, stop
		}
		return nil, err
	}
	rankLog := m.log.With(zap.String("job", key.job), zap.Uint32("dp_rank", key.dpRank))
	m.reportBlocklist(rankLog, rank)                      // blocklist.go
	leave, err := m.admitWorkingSet(corpus, req, rankLog) // workingset.go
	if err != nil {
		release()
		return nil, err
	}
	release = func() { leave(); use.release() }
	cfg := corpus.Config()
	if err := skipTo(ctx, rank, req.SkipToStep, uint64(cfg.BatchSize)*uint64(cfg.LineTokens()), m.stopped); err != nil {
		release()
		if stop := m.stopped(); stop != nil && ctx.Err() != nil {
			return nil, stop
		}
		return nil, err
	}
	id := m.newSessionID()
	r, err := m.newRing(ringSpec{transport: req.Transport, device: req.Device, geometry: p.geometry, consumers: req.Consumers})
	if err != nil {
		release()
		return nil, err
	}
	// The producer outlives the open's request: its own context.
	produce, cancel := context.WithCancel(context.Background())
	ss := &session{
		id: id, key: key, groupKey: p.group, transport: req.Transport,
		corpus: corpus, releaseCorpus: release, leaveCorpus: use.leave, ring: r, ctl: r.Control(), datasets: corpus.DatasetNames(),
		cancel: cancel, done: make(chan struct{}),
		attached: make([]bool, req.Consumers), closed: make([]bool, req.Consumers), opened: time.Now(),
		vacant: make([]time.Time, req.Consumers), rejoined: make([]time.Time, req.Consumers),
		settled: make(chan struct{}), procs: make([]*lifeline, req.Consumers), cont: p.cont,
		log: m.log.With(zap.String("session", id), zap.String("job", key.job), zap.Uint32("dp_rank", key.dpRank)),
	}
	ss.pipeline = stream.NewPipeline(rank, r, req.Consumers)
	ss.waits = newWaitMeter(int(req.Consumers), m.cfg.StallLog, ss.log)
	ss.pipeline.SetHooks(m.hooks(ss, cfg.LineTokens()))
	if ss.ctl != nil {
		m.metrics.clientWait.track(ss.ctl)
	}
	go func() {
		defer close(ss.done)
		if err := ss.pipeline.Run(produce); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, stream.ErrClosed) {
			ss.log.Error("producer stopped", zap.Error(err))
			m.metrics.errors.WithLabelValues("producer").Inc()
		}
	}()
	return ss, nil
}

// describe tells consumer c, on GPU device, what it joined and what to map.
func (s *session) describe(c, device int) Opened {
	cfg := s.corpus.Config()
	return Opened{ID: s.id, Consumer: c, Transport: s.transport, Ring: s.ring.Layout(device),
		LineTokens: cfg.LineTokens(), BatchSize: cfg.BatchSize, StartStep: s.pipeline.StartStep(),
		MaxSkipSteps: MaxSkipSteps(uint64(cfg.BatchSize) * uint64(cfg.LineTokens())), Fields: s.corpus.Layout().Fields,
		JobFingerprint: s.corpus.JobFingerprint(), Skips: s.pipeline.Skips(s.pipeline.StartStep())}
}

// resumeSource names where a restored state came from, for an error that a
// state refused against the corpus gives: the rank files' folder, or the
// request's field.
func resumeSource(req Request) string {
	switch {
	case req.ResumeSharded != nil:
		return "resume_sharded"
	case req.ResumeFrom != "":
		return fmt.Sprintf("resume_from %s", filepath.Join(req.ResumeFrom, state.Dir))
	case len(req.ResumeStates) > 0:
		return "resume_states"
	}
	return "restored state"
}

// restore builds the state a session resumes from, if any; a resume folder
// is read through the roots.
func restore(fp state.Fingerprint, roots *files.Roots, req Request) (*state.Restored, error) {
	switch {
	case req.ResumeSharded != nil:
		return req.ResumeSharded.Restore(fp, req.DPRank, req.DPSize)
	case req.ResumeFrom != "":
		f, err := roots.Folder("resume_from", req.ResumeFrom)
		if err != nil {
			return nil, err
		}
		if req.Caller != nil {
			f = f.For(*req.Caller)
		}
		// Only the files whose shards overlap this rank's, each bounded.
		return state.ReadOwned(f, fp, req.DPRank, req.DPSize)
	case len(req.ResumeStates) > 0:
		// Named only where an error needs a name: a request may give
		// many states, and is refused at the first bad one.
		return state.MergeNamed(fp, func(i int) string { return fmt.Sprintf("resume_states[%d]", i) }, req.ResumeStates)
	}
	return nil, nil
}
