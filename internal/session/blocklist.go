package session

import (
	"go.uber.org/zap"

	"github.com/dataloaderd/dataloaderd/internal/state"
	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// maxBlockedLogged bounds the warnings one open logs for blocked documents
// served already; the rest are counted in one line.
const maxBlockedLogged = 100

// reportBlocklist logs the blocklist a rank put in effect at its open, and
// warns of each blocked document of its shards it had served already
// (counted in dataloaderd_blocked_served_documents_total), of the sha256
// entries that cannot be checked against what was served, and of a
// blocklist a resume dropped.
func (m *Manager) reportBlocklist(log *zap.Logger, rank *stream.Rank) {
	cur, _ := state.InEffect(rank.Blocklists())
	rep := rank.BlockReport()
	if !rep.Changed {
		return // none, or one in effect before this open: reported then
	}
	if cur.Fingerprint == "" {
		log.Warn("blocklist dropped: the config gives none, the state logged one; its documents are served again from the next batch",
			zap.Uint64("after_step", cur.Step))
		return
	}
	log.Info("blocklist in effect", zap.String("fingerprint", cur.Fingerprint), zap.Int("entries", cur.Entries),
		zap.Uint64("after_step", cur.Step))
	// The cursors a skipped range passed moved as serving its lines would:
	// a document the report finds passed may be in such a range, skipped.
	served := "blocked document was served before the blocklist arrived"
	if st := rank.State(); len(st.Skips) > len(state.PendingSkips(st.Skips, st.Step)) {
		passed := st.Skips[:len(st.Skips)-len(state.PendingSkips(st.Skips, st.Step))]
		served = "blocked document was served, or passed in a skipped range (" + state.SkipsText(passed, st.Step) + "), before the blocklist arrived"
	}
	for i, s := range rep.Served {
		if i == maxBlockedLogged {
			log.Warn("more blocked documents were served before the blocklist arrived", zap.Int("more", len(rep.Served)-i),
				zap.Uint64("at_or_before_step", s.Step))
			break
		}
		if s.Record != "" {
			log.Warn("blocked text document's block was begun before the blocklist arrived: it may have been served", zap.String("dataset", s.Dataset),
				zap.String("record", s.Record), zap.Uint64("unit", s.Document), zap.Uint64("epoch", s.Epoch), zap.Uint64("at_or_before_step", s.Step))
			continue
		}
		log.Warn(served, zap.String("dataset", s.Dataset),
			zap.Uint64("document", s.Document), zap.Uint64("epoch", s.Epoch), zap.Uint64("at_or_before_step", s.Step))
	}
	m.metrics.blockedServed.Add(float64(len(rep.Served)))
	for ds, n := range rep.Unchecked {
		log.Warn("blocklist entries by sha256 name text, not a place: whether any was served before the blocklist arrived is not known",
			zap.String("dataset", ds), zap.Int("entries", n), zap.Uint64("after_step", cur.Step))
	}
}
