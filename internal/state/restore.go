package state

import (
	"fmt"
	"slices"
)

// Restored is the merged state of a whole saved world: every logical shard's
// cursor, from whichever rank owned it.
type Restored struct {
	// Step is the highest step of the saved world's rank files, of every
	// file, read whole or only its start (ReadOwned): the ranks of a world
	// save independently, so their files may be of different steps (each
	// rank's latest save before a crash), and every rank resumed from the
	// world takes the same step.
	Step   uint64
	Shards map[ShardID]Shard
	// FromSize is the dp_size of the saved world (for a sharded state saved
	// before it was kept: the resuming world's).
	FromSize uint32
	// Mixture is the saved world's mixture log (the lowest rank's; every rank
	// keeps the same one), the changes queued after Step included. Empty
	// when the files predate the log.
	Mixture []MixChange
	// MixturesDiffer is set when the ranks' current weights or queued
	// changes disagree; the resumed ranks then treat the configured weights
	// as a change (and drop the queued ones).
	MixturesDiffer bool
	// Skips is the saved world's skip log, merged from its files: a range
	// any file logs (files of one world saved at different steps log the
	// ranges skipped before their own step), and none that two files log
	// differently (refused).
	Skips []SkipRange
	// Blocklists is the saved world's blocklist log (the lowest rank's).
	Blocklists []Blocklist
	// Added names the datasets of the current config that the saved world
	// did not have: their shards start from fresh cursors.
	Added []string
}

// Merge checks the state files of one saved world against the current
// fingerprint and merges them. Every shard of every dataset must appear in
// exactly one file. names label the blobs in errors. A blob larger than the
// largest state a rank of the config could write (one owning every shard)
// is refused before it is decoded.
func Merge(cur Fingerprint, names []string, blobs [][]byte) (*Restored, error) {
	return MergeNamed(cur, func(i int) string { return names[i] }, blobs)
}

// MergeNamed is Merge whose blob i is labelled name(i), called only for a
// blob an error names: states given in a request are not each given a name
// they may never need. The step is the highest of the blobs', each read
// from its start (stepOf) before any is merged.
func MergeNamed(cur Fingerprint, name func(i int) string, blobs [][]byte) (*Restored, error) {
	bound, err := FileBound(cur, cur.LogicalShards)
	if err != nil {
		return nil, err
	}
	var step uint64
	for i, b := range blobs {
		if int64(len(b)) > bound {
			return nil, fmt.Errorf("%w: %s is %d bytes, more than the %d bytes (%s) the state of a rank owning all %d shards of %d datasets can take under this config; it was not decoded",
				ErrTooLarge, name(i), len(b), bound, mib(bound), cur.LogicalShards, len(cur.Datasets))
		}
		s, err := stepOf(b[:min(len(b), StepPrefixBytes)])
		if err != nil {
			return nil, stepRefused(name(i), b, err)
		}
		step = max(step, s)
	}
	m := newMerger(cur, 0, cur.LogicalShards, step, name)
	for i, b := range blobs {
		s, _ := stepOf(b[:min(len(b), StepPrefixBytes)]) // read again, not kept: a request may give many states
		if _, err := m.add(i, b, s); err != nil {
			return nil, err
		}
	}
	return m.done(true)
}

// merger merges the state files of one saved world one at a time, so that
// a reader holds one file's bytes at once; it keeps the cursors of shards
// [lo, hi) of each dataset (a rank resuming from a folder keeps its own).
// Files are known by an index, name(i) labelling file i where needed. The
// resumed step is the world's, known before the first file is merged (the
// highest of its files' steps): the logs merged are compared as they mix
// the batches after it, as the resumed ranks take them.
type merger struct {
	cur    Fingerprint
	lo, hi uint32
	name   func(i int) string
	out    *Restored
	ranks  map[uint32]int // the index of each dp_rank's file
	// skipFrom names the file each merged skip range came from.
	skipFrom []string
	// blockFrom names the file the merged blocklist log came from.
	blockFrom string
}

func newMerger(cur Fingerprint, lo, hi uint32, step uint64, name func(i int) string) *merger {
	return &merger{cur: cur, lo: lo, hi: hi, name: name, out: &Restored{Step: step, Shards: map[ShardID]Shard{}}, ranks: map[uint32]int{}}
}

// add checks state file i, whose step read from its start was step, and
// merges it; it returns the rank's state (its shards those of the current
// datasets' order).
func (m *merger) add(i int, b []byte, step uint64) (Rank, error) {
	cur, out := m.cur, m.out
	first := len(m.ranks) == 0
	fp, r, err := decode(b)
	if err != nil {
		return Rank{}, fmt.Errorf("%w: %s: %v", ErrMismatch, m.name(i), err)
	}
	if r.Step != step {
		return Rank{}, fmt.Errorf("%w: %s is of step %d, but its start, read first, said step %d: it changed while it was read, or names its step twice",
			ErrMismatch, m.name(i), r.Step, step)
	}
	index, added, err := fp.Reconcile(cur)
	if err != nil {
		return Rank{}, fmt.Errorf("%w: %s was saved from another corpus or config: %v", ErrMismatch, m.name(i), err)
	}
	out.Added = added
	r.Mixture = RemapMixture(r.Mixture, index, len(cur.Datasets))
	moved := make(map[ShardID]Shard, len(r.Shards))
	for id, sh := range r.Shards {
		if id.Dataset < 0 || id.Dataset >= len(index) {
			return Rank{}, fmt.Errorf("%w: %s holds %v, outside its %d datasets", ErrMismatch, m.name(i), id, len(index))
		}
		moved[ShardID{Dataset: index[id.Dataset], Shard: id.Shard}] = sh
	}
	r.Shards = moved
	if out.FromSize != 0 && r.DPSize != out.FromSize {
		return Rank{}, fmt.Errorf("%w: %s is of dp_size %d, other states of dp_size %d", ErrMismatch, m.name(i), r.DPSize, out.FromSize)
	}
	out.FromSize = r.DPSize
	if prev, dup := m.ranks[r.DPRank]; dup {
		return Rank{}, fmt.Errorf("%w: %s and %s both hold dp_rank %d", ErrMismatch, m.name(prev), m.name(i), r.DPRank)
	}
	m.ranks[r.DPRank] = i
	if len(r.Skips) > 0 { // name(i) only where needed: see MergeNamed
		if out.Skips, m.skipFrom, err = mergeSkips(out.Skips, r.Skips, m.skipFrom, m.name(i)); err != nil {
			return Rank{}, err
		}
	}
	if len(r.Blocklists) > 0 { // name(i) only where needed
		if out.Blocklists, m.blockFrom, err = mergeBlocklists(out.Blocklists, m.blockFrom, r.Blocklists, m.name(i)); err != nil {
			return Rank{}, err
		}
	}
	if first || r.DPRank == 0 {
		if !first && !sameCurrent(out.Mixture, r.Mixture, out.Step) {
			out.MixturesDiffer = true
		}
		out.Mixture = r.Mixture
	} else if !sameCurrent(out.Mixture, r.Mixture, out.Step) {
		out.MixturesDiffer = true
	}
	for id, s := range r.Shards {
		if id.Dataset < 0 || id.Dataset >= len(cur.Datasets) || id.Shard >= cur.LogicalShards {
			return Rank{}, fmt.Errorf("%w: %s holds %v, outside %d datasets of %d shards", ErrMismatch, m.name(i), id, len(cur.Datasets), cur.LogicalShards)
		}
		if id.Shard < m.lo || id.Shard >= m.hi {
			continue
		}
		if _, dup := out.Shards[id]; dup {
			return Rank{}, fmt.Errorf("%w: %v is in more than one state file", ErrMismatch, id)
		}
		out.Shards[id] = s
	}
	return r, nil
}

// done checks that the files merged hold every shard kept, in every
// dataset saved (those added since start fresh), and, with every, that
// they were every rank of the saved world.
func (m *merger) done(every bool) (*Restored, error) {
	cur, out := m.cur, m.out
	if every && len(m.ranks) != int(out.FromSize) {
		return nil, fmt.Errorf("%w: %d of %d ranks' states given: every rank of the saved world is needed", ErrMismatch, len(m.ranks), out.FromSize)
	}
	out.Skips = TrimSkips(out.Skips, out.Step)
	if err := checkSkipLog(out.Skips, out.Step); err != nil {
		return nil, fmt.Errorf("%w: the merged %v", ErrMismatch, err)
	}
	for d := range cur.Datasets {
		fresh := slices.Contains(out.Added, cur.Datasets[d].Name)
		for s := m.lo; s < m.hi; s++ {
			if fresh {
				out.Shards[ShardID{Dataset: d, Shard: s}] = Shard{}
				continue
			}
			if _, ok := out.Shards[ShardID{Dataset: d, Shard: s}]; !ok {
				return nil, fmt.Errorf("%w: no saved state holds %v (dataset %q)", ErrMismatch, ShardID{d, s}, cur.Datasets[d].Name)
			}
		}
	}
	return out, nil
}

// sameCurrent reports whether two mixture logs mix the batches after step
// (the resumed one) alike: the same weights in effect, and the same changes
// queued (steps and weights). Files of one world saved at different steps
// log the same changes, those after their own step queued: each is taken
// at the step resumed.
func sameCurrent(a, b []MixChange, step uint64) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	qa, qb := queuedFrom(a, step), queuedFrom(b, step)
	if len(a)-qa != len(b)-qb || (qa == 0) != (qb == 0) {
		return false
	}
	if qa > 0 && !SameMixture(a[qa-1], b[qb-1]) {
		return false
	}
	for k := range a[qa:] {
		x, y := a[qa+k], b[qb+k]
		if x.Step != y.Step || !SameMixture(x, y) {
			return false
		}
	}
	return true
}
