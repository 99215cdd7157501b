package session

import (
	"fmt"

	"github.com/dataloaderd/dataloaderd/internal/errkind"
	"github.com/dataloaderd/dataloaderd/internal/ring"
	"github.com/dataloaderd/dataloaderd/internal/state"
	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// ErrOverBudget: a session would take the daemon past one of its budgets.
var ErrOverBudget = errkind.New(errkind.ResourceExhausted, "over budget")

// sizeRing checks the ring's geometry, its slots of the layout's bytes,
// and sets the host memory the ring takes: its slots in the daemon
// (inline) or in the shm directory (shm); a cuda ring's slots are on the
// GPU, and its control block is a page or two. The geometry bounds the
// product, so nothing is allocated for a request that cannot be served.
func (p *plan) sizeRing() error {
	cfg := p.checked.Config()
	slotBytes := int64(p.checked.Layout().Bytes)
	if slotBytes > ring.MaxRingBytes {
		return fmt.Errorf("%w: a batch of %d lines of %d tokens (with metadata %v) is %d bytes, more than the %d-byte limit of a ring",
			ring.ErrGeometry, cfg.BatchSize, cfg.LineTokens(), cfg.Metadata, slotBytes, int64(ring.MaxRingBytes))
	}
	g, err := newGeometry(p.req.Slots, int(slotBytes)) // rings.go
	if err != nil {
		return err
	}
	p.geometry = g
	if p.transport.hostSlots {
		p.ringBytes = int64(g.slots) * int64(ring.StrideFor(g.slotBytes))
	}
	return nil
}

// reserveLocked takes n bytes of the ring budget for a session being made;
// m.mu is held. Over the budget it says how much is in use and by how many
// sessions, and the flag that sets it.
func (m *Manager) reserveLocked(n int64) error {
	limit := m.cfg.RingBudget
	if limit <= 0 || n == 0 {
		m.ringUsed += n
		return nil
	}
	if m.ringUsed+n > limit {
		return fmt.Errorf("%w: ring memory: this session's ring needs %s, and %s of the %s budget is held by %d open sessions; close sessions, make rings smaller (slots, batch_size), or raise --ring-budget-mb",
			ErrOverBudget, mib(n), mib(m.ringUsed), mib(limit), len(m.sessions))
	}
	m.ringUsed += n
	return nil
}

// unreserve gives back what reserveLocked took.
func (m *Manager) unreserve(n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ringUsed -= n
}

// mib formats a byte count for people.
func mib(n int64) string {
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// checkUserLocked refuses a new session of user uid past MaxSessionsPerUser;
// m.mu is held.
func (m *Manager) checkUserLocked(uid uint32) error {
	limit := m.cfg.MaxSessionsPerUser
	if limit <= 0 {
		return nil
	}
	n := 0
	for k := range m.sessions {
		if k.uid == uid {
			n++
		}
	}
	for k := range m.opening {
		if k.uid == uid {
			n++
		}
	}
	if n >= limit {
		return fmt.Errorf("%w: sessions: user %d has %d sessions open or opening, the most one user may; close sessions or raise --max-sessions-per-user",
			ErrOverBudget, uid, n)
	}
	return nil
}

// checkStateSize refuses a session whose state could outgrow what the
// daemon takes back (state.CheckLargest): a state goes back whole in
// OpenSession (a DCP load, the client's reconnect after a daemon restart)
// or is read from a rank file, so whatever a session may come to write
// must fit. The schedules that count are the config's and those in the
// log it resumed from, which it keeps.
func checkStateSize(fp state.Fingerprint, req Request, from *state.Restored) error {
	points := len(req.Config.Schedule)
	if from != nil {
		points = max(points, state.SchedulePoints(from.Mixture))
	}
	if err := state.CheckLargest(fp, req.DPRank, req.DPSize, points); err != nil {
		return fmt.Errorf("%w: %w", stream.ErrInvalidConfig, err)
	}
	return nil
}

// checkStateSizeEarly is checkStateSize from the plan alone, before a
// corpus is opened: with a fingerprint of what the config names (the
// corpus's adds its files' counts and digests, so it is never shorter), a
// geometry refused here would be refused once the corpus is open.
func (p *plan) checkStateSizeEarly() error {
	return checkConfigStateSize(p.checked, p.req.DPRank, p.req.DPSize)
}

// checkConfigStateSize refuses a config whose state at rank r of w could be
// larger than the daemon takes back (state.CheckLargest), from the config
// alone: an open's rule, and StateTemplate's, whose reply would be that
// state's cursors.
func checkConfigStateSize(checked stream.Checked, dpRank, dpSize uint32) error {
	cfg := checked.Config()
	fp := state.Fingerprint{SeqLen: cfg.SeqLen, LogicalShards: cfg.LogicalShards, Seed: cfg.Seed, EOS: cfg.EOS, BOS: cfg.BOS,
		ShuffleWindow: uint32(cfg.Window()), RunTokens: cfg.RunTokens}
	for _, d := range cfg.Datasets {
		fp.Datasets = append(fp.Datasets, state.DatasetPrint{Name: d.Name, Format: d.Format})
	}
	if err := state.CheckLargest(fp, dpRank, dpSize, len(cfg.Schedule)); err != nil {
		return fmt.Errorf("%w: %w", stream.ErrInvalidConfig, err)
	}
	return nil
}

// HostRingsOutsideHeap is the ring memory reserved that is not in the Go
// heap: the slots of shm rings, pages in the shm directory that the
// daemon's memory cgroup is charged for (it writes them), and those of
// sessions still being made (counted so until their transport is known).
// Inline rings are in the heap. Main keeps the Go runtime's soft memory
// limit below the cgroup's limit by it.
func (m *Manager) HostRingsOutsideHeap() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.ringUsed
	for _, ss := range m.sessions {
		if ss.transport.of().inHeap {
			n -= ss.reserved
		}
	}
	return n
}
