package session

import (
	"errors"
	"fmt"

	"github.com/dataloaderd/dataloaderd/internal/ring"
)

// ErrOverBudget: a session would take the daemon past one of its budgets.
var ErrOverBudget = errors.New("over budget")

// ringBytes is the host memory a session's ring takes: its slots in the
// daemon (inline) or in the shm directory (shm); a cuda ring's slots are on
// the GPU, and its control block is a page or two. The request is checked
// first: the geometry bounds the product, so nothing is allocated for a
// request that cannot be served.
func (r *Request) ringBytes() (int64, error) {
	if err := r.Config.Validate(); err != nil {
		return 0, err
	}
	slotBytes := int64(r.Config.Layout().Bytes)
	if slotBytes > ring.MaxRingBytes {
		return 0, fmt.Errorf("%w: a batch of %d lines of %d tokens (with metadata %v) is %d bytes, more than the %d-byte limit of a ring",
			ring.ErrGeometry, r.Config.BatchSize, r.Config.LineTokens(), r.Config.Metadata, slotBytes, int64(ring.MaxRingBytes))
	}
	if err := ring.CheckGeometry(r.Slots, int(slotBytes)); err != nil {
		return 0, err
	}
	if r.Transport == CUDA {
		return 0, nil
	}
	return int64(r.Slots) * int64(ring.StrideFor(int(slotBytes))), nil
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
