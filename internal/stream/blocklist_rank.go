package stream

import (
	"cmp"
	"fmt"
	"slices"
	"sort"

	"github.com/dataloaderd/dataloaderd/internal/state"
)

// BlockedServed is a blocked document that was served, whole or in part,
// before the blocklist arrived: at or before step Step, in epoch Epoch of
// its shard (and in every epoch before it).
type BlockedServed struct {
	Dataset  string
	Document uint64 // the dataset's unit: the document's index in the dataset
	// Record names a text document by its place ("line 17 of FILE", "row
	// 3 of FILE", in unit Document): its unit was begun, so it may have
	// been served.
	Record string
	Epoch  uint64
	Step   uint64
}

// BlockReport is what a rank found when a blocklist arrived at its resume
// (Rank.BlockReport): the documents of its shards the blocklist names that
// it had served already, and by dataset the sha256 entries, which name
// text, not a place, and so cannot be checked against what was served.
type BlockReport struct {
	// Changed is set when the rank's open put a blocklist in effect, or
	// dropped one: its log has a record of the rank's first step.
	Changed   bool
	Served    []BlockedServed
	Unchecked map[string]int
}

// blocklistLog is the rank's blocklist log: the restored one, and a
// record of the corpus's blocklist when it differs from the one in
// effect (a blocklist added, changed or, "" for none, dropped at this
// resume), taking effect after step.
func blocklistLog(c *Corpus, from *state.Restored, step uint64) (log []state.Blocklist, changed bool) {
	if from != nil {
		log = slices.Clone(from.Blocklists)
	}
	cur, has := c.Blocklist()
	last, logged := state.InEffect(log)
	if has == (logged && last.Fingerprint != "") && (!has || last.Fingerprint == cur.Fingerprint) {
		return log, false
	}
	cur.Step = step
	return state.AddBlocklist(log, cur), true
}

// Blocklists is the rank's blocklist log, as its state holds it.
func (r *Rank) Blocklists() []state.Blocklist { return slices.Clone(r.blocklists) }

// BlockReport reports, for a blocklist that arrived at this rank's resume,
// the blocked documents of the rank's shards served before it; empty when
// the blocklist was there before, or the rank starts the run.
func (r *Rank) BlockReport() BlockReport { return r.blockReport }

// checkServed fills the rank's BlockReport for a blocklist that arrived
// at a resume from step.
func (r *Rank) checkServed() error {
	block := r.corpus.block
	rep := BlockReport{Changed: true, Unchecked: map[string]int{}}
	for i, rd := range r.datasets {
		bu := block.byDataset[i]
		if bu == nil {
			continue
		}
		if n := len(bu.hashes); n > 0 {
			rep.Unchecked[r.corpus.datasets[i].name] = n
		}
		units := make([]uint64, 0, len(bu.units)+len(bu.records))
		for u := range bu.units {
			units = append(units, u)
		}
		for u := range bu.records {
			units = append(units, u)
		}
		slices.Sort(units)
		for _, sr := range rd.all {
			s := sr.shard
			lo := sort.Search(len(units), func(k int) bool { return units[k] >= s.lo })
			hi := sort.Search(len(units), func(k int) bool { return units[k] >= s.lo+s.n })
			if lo == hi {
				continue
			}
			served, err := r.servedOf(sr, units[lo:hi])
			if err != nil {
				return err
			}
			for _, sv := range served {
				rep.Served = append(rep.Served, byRecord(r.corpus.datasets[i], bu, sv)...)
			}
		}
	}
	r.blockReport = rep
	return nil
}

// byRecord is the report of a blocked unit served: itself, or for a text
// unit each record of it the blocklist names by place.
func byRecord(ds *shardedSource, bu *blockedUnits, sv BlockedServed) []BlockedServed {
	recs := bu.records[sv.Document]
	if len(recs) == 0 {
		return []BlockedServed{sv}
	}
	file := ""
	if l, ok := ds.src.(unitLocator); ok {
		if path, _, ok := l.LocateUnit(sv.Document); ok {
			file = " of " + path
		}
	}
	out := make([]BlockedServed, 0, len(recs))
	for _, rec := range recs {
		sv.Record = fmt.Sprintf("line %d%s", rec.Line, file)
		if rec.Line == 0 {
			sv.Record = fmt.Sprintf("row %d%s", rec.Row, file)
		}
		out = append(out, sv)
	}
	return out
}

// servedOf returns which of units (the shard's blocked ones) the shard
// has served: all of them after its first epoch; in its current epoch
// those before its window (and the one its window starts inside), and
// those the window's lines taken hold part of.
func (r *Rank) servedOf(sr *shardRun, units []uint64) ([]BlockedServed, error) {
	s, st := sr.shard, sr.st
	w := st.Window
	report := func(u, epoch uint64) BlockedServed {
		return BlockedServed{Dataset: s.ds.name, Document: u, Epoch: epoch, Step: r.step}
	}
	var out []BlockedServed
	if w.Epoch > 0 || r.fr.ended(w) {
		for _, u := range units {
			out = append(out, report(u, w.Epoch-1))
		}
		return out, nil
	}
	want := make(map[uint64]bool, len(units))
	for _, u := range units {
		want[u] = true
	}
	seen := func(u uint64) {
		if want[u] {
			out = append(out, report(u, w.Epoch))
			delete(want, u)
		}
	}
	// The unit under a window cursor with an offset was begun by the
	// window before.
	for p := uint64(0); (p < w.Pos || p == w.Pos && w.Offset > 0) && len(want) > 0; p++ {
		seen(s.unit(w.Epoch, p))
	}
	if st.Taken == 0 || len(want) == 0 {
		return out, nil
	}
	var win window
	if err := s.openWindow(&r.fr, w, &win, 0); err != nil {
		return nil, err
	}
	for k := uint64(0); k < st.Taken && k < win.lines; k++ {
		j := s.lineOrder(&r.fr, w, win.lines, k)
		for c := win.starts[j]; c.Less(win.starts[j+1]) && !r.fr.ended(c); c = s.next(c) {
			seen(s.unit(c.Epoch, c.Pos))
		}
	}
	slices.SortFunc(out, func(a, b BlockedServed) int { return cmp.Compare(a.Document, b.Document) })
	return out, nil
}
