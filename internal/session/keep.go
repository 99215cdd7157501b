package session

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"go.uber.org/zap"

	"github.com/dataloaderd/dataloaderd/internal/errkind"
	"github.com/dataloaderd/dataloaderd/internal/mapped"
)

// A session outlives its consumer. When a consumer's process dies without
// closing the session (its batch stream ends and the process is seen to
// exit: lifeline.go), the session is not reclaimed: with KeepDetached it
// stays, its producer and ring as they were, the consumer's place vacant,
// for that long. A new process of the same user that opens the same job and
// dp_rank, with the same config and no resume point, takes the place: the
// pipeline hands it again the batches the dead one was handed and did not
// release, then the rest, so the consumer's stream goes on exactly
// (stream.Pipeline.Rejoin). An open that asks for a fresh start (Fresh, a
// resume point, a skip, a reconnect) replaces the kept session instead,
// when none of its consumers lives. No process within KeepDetached: the
// session is reclaimed, its ring freed. Each vacancy's outcome is counted
// in dataloaderd_lost_consumers_total.

// The outcomes of a vacancy, the label values of lostConsumers.
const (
	outcomeContinued = "continued"
	outcomeExpired   = "expired"
	outcomeFresh     = "fresh"
)

// What an open does after openKept.
const (
	joinIt    = iota // no vacancy: join the session as before
	openedIt         // took a place, or refused: return
	openAgain        // the kept session went (a fresh start): look again
)

// continuity is what a new process must ask for to take a dead consumer's
// place: the same config (its stream), world size, consumers, transport
// and ring.
type continuity struct {
	config    string
	dpSize    uint32
	consumers int
	transport Transport
	slots     int
}

// continuity is the request's (defaults resolved).
func (r *Request) continuity() continuity {
	cfg, err := json.Marshal(r.Config)
	if err != nil {
		cfg = []byte(err.Error()) // matches no other config
	}
	return continuity{config: string(cfg), dpSize: r.DPSize, consumers: r.Consumers, transport: r.Transport, slots: r.Slots}
}

// differs names what of o is not as c asks, or "" when nothing.
func (c continuity) differs(o continuity) string {
	switch {
	case c.config != o.config:
		return "the job config"
	case c.dpSize != o.dpSize:
		return fmt.Sprintf("dp_size (%d, kept %d)", o.dpSize, c.dpSize)
	case c.consumers != o.consumers:
		return fmt.Sprintf("consumers (%d, kept %d)", o.consumers, c.consumers)
	case c.transport != o.transport:
		return fmt.Sprintf("the transport (%s, kept %s)", o.transport, c.transport)
	case c.slots != o.slots:
		return fmt.Sprintf("slots (%d, kept %d)", o.slots, c.slots)
	}
	return ""
}

// fresh reports whether the request starts its rank over rather than go on
// from a session kept for it.
func (r *Request) fresh() bool {
	return r.Fresh || r.ResumeFrom != "" || len(r.ResumeStates) > 0 || r.ResumeSharded != nil ||
		r.SkipToStep > 0 || r.ReconnectedAfter > 0
}

// leave decides, for a consumer whose stream ended without a close, whether
// its session is kept: with KeepDetached, when the stream ended by its
// client going (no fault of the session's) and its process died. While it
// waits to see the process exit, an open of the session waits for the
// verdict (settling).
func (f *Feed) leave(cause error) bool {
	if f.m.cfg.KeepDetached <= 0 {
		return false
	}
	if k := errkind.Of(cause); k != errkind.Unknown && k != errkind.Canceled {
		return false // the session or the client failed: not a process gone
	}
	s := f.ss
	s.mu.Lock()
	s.leaving++
	s.mu.Unlock()
	died := !f.life.lives(deathGrace, f.m.isStopping)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leaving--
	close(s.settled)
	s.settled = make(chan struct{})
	if !died || s.dropped != "" {
		return false
	}
	s.attached[f.c] = false
	s.vacant[f.c] = time.Now()
	s.log.Info("consumer's process died without closing: session kept for a process to take its place",
		zap.Int("consumer", f.c), zap.Duration("keep_detached", f.m.cfg.KeepDetached), zap.NamedError("stream_end", cause))
	return true
}

// settling is a channel closed when a consumer's verdict is in, while some
// consumer's is awaited; nil when none is.
func (s *session) settling() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leaving == 0 {
		return nil
	}
	return s.settled
}

// openKept is an open's way with the session of its key, ss, when a
// consumer's process died: a new process takes its place, or a fresh start
// replaces the session; joinIt when ss has no vacancy.
func (m *Manager) openKept(ctx context.Context, ss *session, req Request) (Opened, int, error) {
	// A consumer whose process exited and whose stream's end the daemon has
	// not seen yet (a new process may come that fast): wait for its verdict.
	for end := time.Now().Add(deathGrace); ss.settleDead(m.cfg.KeepDetached) && time.Now().Before(end); {
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return Opened{}, openedIt, ctx.Err()
		}
	}
	if wait := ss.settling(); wait != nil {
		select {
		case <-wait:
			return Opened{}, openAgain, nil
		case <-ctx.Done():
			return Opened{}, openedIt, ctx.Err()
		}
	}
	vacant, live := ss.places()
	switch {
	case len(vacant) == 0 || ss.unjoined():
		// A group not whole yet: the open is a member that has not
		// joined, as before (one that died before the group was whole
		// is taken for it: docs/rank-restart.md).
		return Opened{}, joinIt, nil
	case req.fresh() && len(live) > 0:
		return Opened{}, openedIt, fmt.Errorf("%w: job %q dp_rank %d: a fresh start (fresh, resume_from, resume_states or a state dict) "+
			"while consumers %v of its group still read it; the group's processes must all be gone, or take the dead one's place "+
			"with no resume point", ErrSessionExists, req.Job, req.DPRank, live)
	case req.fresh():
		m.dropKept(ss, "replaced: a fresh start of its job and rank (fresh or a resume point) after its consumer's process died", outcomeFresh)
		return Opened{}, openAgain, nil
	}
	if what := ss.cont.differs(req.continuity()); what != "" {
		return Opened{}, openedIt, fmt.Errorf("%w: job %q dp_rank %d is kept for a process to take the place of consumer %d, "+
			"whose process died, and this open asks for other %s: open with the same arguments to go on where it left off, "+
			"or with fresh=True (or a resume point) to start the rank over", ErrConfigDiffers, req.Job, req.DPRank, vacant[0], what)
	}
	o, err := m.takePlace(ss, req.Device)
	return o, openedIt, err
}

// settleDead looks at the processes of the consumers: one that died
// before attaching its stream leaves its place vacant now; it reports
// whether one that died is still attached (its stream's end is on its way:
// wait).
func (s *session) settleDead(keep time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	wait := false
	for c, p := range s.procs {
		if p == nil || s.closed[c] || !s.vacant[c].IsZero() || s.leaving > 0 || !p.exited() {
			continue
		}
		if s.attached[c] {
			wait = true
			continue
		}
		s.procs[c] = nil
		p.close()
		s.vacant[c] = time.Now()
		s.log.Info("consumer's process died before attaching its stream: session kept for a process to take its place",
			zap.Int("consumer", c), zap.Duration("keep_detached", keep))
	}
	return wait
}

// followOpener follows the process that opened consumer o.Consumer until
// its stream attaches (Feed.Follow then follows it).
func (m *Manager) followOpener(o Opened, pid int32) {
	if m.cfg.KeepDetached <= 0 || pid <= 0 {
		return
	}
	m.mu.Lock()
	ss := m.byID[o.ID]
	m.mu.Unlock()
	if ss == nil {
		return
	}
	life := followProcess(pid)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.procs[o.Consumer] != nil || ss.attached[o.Consumer] || ss.dropped != "" {
		life.close()
		return
	}
	ss.procs[o.Consumer] = life
}

// unfollowOpeners lets go of the processes followed for consumers that
// never attached (an attached one's is its feed's).
func (s *session) unfollowOpeners() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c, p := range s.procs {
		if p != nil && !s.attached[c] {
			p.close()
			s.procs[c] = nil
		}
	}
}

// unjoined reports whether some consumer ss declared has not joined yet.
func (s *session) unjoined() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.joined < len(s.attached)
}

// places are ss's vacant consumers and those that live (joined, and
// neither closed nor vacant).
func (s *session) places() (vacant, live []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := 0; c < s.joined; c++ {
		switch {
		case !s.vacant[c].IsZero():
			vacant = append(vacant, c)
		case !s.closed[c]:
			live = append(live, c)
		}
	}
	return vacant, live
}

// takePlace gives the first vacant consumer of ss to a new process on GPU
// device: the releases its dead process (and every other vacant one's)
// wrote in the control block are applied, and it is put back at its first
// step not released, or at the earliest step another vacant consumer of
// the group had not released (its processes died together: their new ones
// read in lockstep).
func (m *Manager) takePlace(ss *session, device int) (Opened, error) {
	ss.mu.Lock()
	c, vacant := -1, []int(nil)
	for i := 0; i < ss.joined; i++ {
		if !ss.vacant[i].IsZero() {
			vacant = append(vacant, i)
		}
	}
	if len(vacant) == 0 || ss.dropped != "" {
		ss.mu.Unlock()
		return Opened{}, fmt.Errorf("%w: job %q dp_rank %d: another process took the dead consumer's place first, or its time ran out: open again",
			ErrSessionExists, ss.key.job, ss.key.dpRank)
	}
	c = vacant[0]
	since := ss.vacant[c]
	ss.vacant[c], ss.rejoined[c] = time.Time{}, time.Now()
	ss.mu.Unlock()
	bound := uint64(math.MaxUint64)
	for _, v := range vacant {
		if ss.ctl != nil {
			// Releases the dead process wrote after the watcher's last look.
			var released uint64
			if mapped.Guard(func() error { released = ss.ctl.Released(v); return nil }) == nil {
				_ = ss.pipeline.ReleaseThrough(v, released) // past the produced steps: ignored
			}
		}
		bound = min(bound, ss.pipeline.ReleasedThrough(v))
	}
	if _, err := ss.ring.AddReader(device); err != nil {
		// The place stays vacant, for another try.
		ss.mu.Lock()
		ss.vacant[c], ss.rejoined[c] = since, time.Time{}
		ss.mu.Unlock()
		return Opened{}, fmt.Errorf("job %q dp_rank %d: %w", ss.key.job, ss.key.dpRank, err)
	}
	last := ss.pipeline.Rejoin(c, bound)
	ss.touch()
	m.metrics.lostConsumers.WithLabelValues(outcomeContinued).Inc()
	ss.log.Info("a new process took the place of a consumer whose process died", zap.Int("consumer", c),
		zap.Uint64("start_step", last), zap.Duration("vacant_for", time.Since(since)))
	o := ss.describe(c, device)
	o.StartStep, o.Continued = last, true
	return o, nil
}

// keptPast reports whether a consumer's place has been vacant for d.
func (s *session) keptPast(now time.Time, d time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.vacant {
		if !t.IsZero() && now.Sub(t) >= d {
			return true
		}
	}
	return false
}

// dropKept drops ss for why, counting its vacancies under outcome.
func (m *Manager) dropKept(ss *session, why, outcome string) {
	vacant, _ := ss.places()
	m.mu.Lock()
	current := m.byID[ss.id] == ss
	m.mu.Unlock()
	if current && len(vacant) > 0 {
		m.metrics.lostConsumers.WithLabelValues(outcome).Add(float64(len(vacant)))
	}
	m.drop(ss, why)
}
