package state

import (
	"fmt"
	"math"
	"sync"

	"github.com/dataloaderd/dataloaderd/internal/errkind"
)

// Bounds of an encoded state. Whatever the daemon writes it must take back
// (a state goes back in OpenSession, as resume_sharded or resume_states, or
// is read from a rank file), and whatever it takes back it decodes in
// memory: so the largest state a session can come to write is bounded at
// open (CheckLargest), from the geometry, and a rank file is read only up
// to the largest its rank could have written (FileBound).
const (
	// MaxBytes bounds the largest state a session may come to write, in
	// either of its encodings (the rank file's JSON, or the sharded form of
	// GetState, which is never larger).
	MaxBytes = 32 << 20
	// MaxLogBytes bounds its mixture log, the part that does not follow
	// from the geometry (the schedules of up to MaxMixLog entries of
	// history, and up to MaxQueued queued changes).
	MaxLogBytes = 8 << 20
	// MaxFileBytes bounds a rank file read with no config to bound it by
	// (ReadFolder, for dataloaderd inspect): the daemon writes none larger
	// than MaxBytes; the rest is room for the files of earlier daemons,
	// which bounded their states only so.
	MaxFileBytes = 256 << 20
)

// ErrTooLarge marks a config whose state could outgrow MaxBytes, and a rank
// file larger than the largest state its rank could have written.
var ErrTooLarge = errkind.New(errkind.FailedPrecondition, "state too large")

// shape is the encoded size of a state of worst-case values under one
// fingerprint, as an affine function of its counts, measured by encoding
// small states (Encode) rather than by a formula that could drift from it.
// Every number of the measured states is as long as its type allows
// (20-digit counts, 24-character weights), so a real state of the same
// counts is never longer.
type shape struct {
	// bare is a state owning one shard per dataset, with no mixture log
	// (and the longest blocklist and skip logs).
	bare int64
	// perShard is one more owned shard in every dataset.
	perShard int64
	// firstEntry is a log of one history entry with a one-point schedule;
	// perEntry one more such entry; perPoint one more point in one entry;
	// perQueued one more queued change.
	firstEntry, perEntry, perPoint, perQueued int64
}

// measure encodes the five small states that give a fingerprint's shape.
func measure(fp Fingerprint) (shape, error) {
	var err error
	size := func(owned uint32, entries, points, queued int) int64 {
		r := worstRank(len(fp.Datasets), owned, entries, points, queued)
		r.Blocklists, r.Skips = nil, nil // counted by fixedLogBytes
		b, e := Encode(fp, r)
		if e != nil {
			err = e
		}
		return int64(len(b))
	}
	bare := size(1, 0, 0, 0)
	one := size(1, 1, 1, 0)
	s := shape{
		bare:       bare + fixedLogBytes(),
		perShard:   size(2, 0, 0, 0) - bare,
		firstEntry: one - bare,
		perEntry:   size(1, 2, 1, 0) - one,
		perPoint:   size(1, 1, 2, 0) - one,
		perQueued:  size(1, 1, 1, 1) - one,
	}
	return s, err
}

// worstRank is a state of a rank owning `owned` shards in each of datasets
// datasets, with a log of `entries` entries of history, each with a
// schedule of `points` points, and `queued` changes queued after it; every
// number as long as it can be.
func worstRank(datasets int, owned uint32, entries, points, queued int) Rank {
	const count = math.MaxUint64
	weight := 1.2345678901234567e-06 // "0.0000012345678901234567": the longest float64 encoding/json writes
	weights := func() []float64 {
		w := make([]float64, datasets)
		for i := range w {
			w[i] = weight
		}
		return w
	}
	r := Rank{DPRank: math.MaxUint32 - 1, DPSize: math.MaxUint32, Step: count, Shards: map[ShardID]Shard{}}
	first := uint32(math.MaxUint32) - owned
	for d := 0; d < datasets; d++ {
		for k := uint32(0); k < owned; k++ {
			r.Shards[ShardID{Dataset: d, Shard: first + k}] = Shard{Lines: count,
				Window: Cursor{Epoch: count, Pos: count, Offset: count}, Taken: count, Base: count}
		}
	}
	for e := 0; e < entries; e++ {
		mc := MixChange{Step: count, Weights: weights(), Runtime: true}
		for p := 0; p < points; p++ {
			mc.Schedule = append(mc.Schedule, SchedulePoint{Step: count, Weights: weights(), Linear: true})
		}
		r.Mixture = append(r.Mixture, mc)
	}
	for q := 0; q < queued; q++ {
		r.Mixture = append(r.Mixture, MixChange{Step: count, Weights: weights(), Runtime: true})
	}
	r.Blocklists, r.Skips = worstBlocklists(), worstSkips()
	return r
}

// worstBlocklists is the longest blocklist log a state may hold: every
// state may log one, so it is counted in the bare size.
func worstBlocklists() []Blocklist {
	out := make([]Blocklist, maxBlocklists)
	for i := range out {
		out[i] = Blocklist{Fingerprint: "0123456789abcdef", Entries: math.MaxInt, Step: math.MaxUint64}
	}
	return out
}

// worstSkips is the longest skip log a state may hold (MaxSkipLog ranges
// passed and MaxSkipsPending ahead), every step as long as it can be:
// every state may log one, so it is counted in the bare size.
func worstSkips() []SkipRange {
	out := make([]SkipRange, MaxSkipLog+MaxSkipsPending)
	for i := range out {
		out[i] = SkipRange{First: MaxSkipStep, Last: MaxSkipStep}
	}
	return out
}

// fixedLogBytes is what the longest blocklist log and the longest skip log
// add to an encoded state, whatever its fingerprint: measured once, not at
// every open.
var fixedLogBytes = sync.OnceValue(func() int64 {
	r := Rank{DPSize: 1, Shards: map[ShardID]Shard{}}
	without, _ := Encode(Fingerprint{}, r)
	r.Blocklists, r.Skips = worstBlocklists(), worstSkips()
	with, _ := Encode(Fingerprint{}, r)
	return int64(len(with) - len(without))
})

// cursors is the size of a state owning `owned` shards per dataset, with
// no mixture log.
func (s shape) cursors(owned uint32) int64 {
	return s.bare + int64(max(owned, 1)-1)*s.perShard
}

// log is the most a mixture log can add when each entry of its history
// has a schedule of `points` points: MaxMixLog such entries, and MaxQueued
// queued changes.
func (s shape) log(points int) int64 {
	points = max(points, 1)
	return s.firstEntry + (MaxMixLog-1)*s.perEntry + MaxMixLog*int64(points-1)*s.perPoint + MaxQueued*s.perQueued
}

// Largest is the size of the largest state a rank owning `owned` shards of
// each dataset of fp can come to write when no schedule of its mixture log
// has more than `points` points.
func Largest(fp Fingerprint, owned uint32, points int) (int64, error) {
	s, err := measure(fp)
	if err != nil {
		return 0, err
	}
	return s.cursors(owned) + s.log(points), nil
}

// CheckLargest refuses the geometry of a session whose state could come to
// outgrow MaxBytes, naming the count to lower: rank r of w owns its shards
// of fp.LogicalShards in each of fp's datasets, and the largest schedule in
// its config or in the log it resumed from has `points` points.
func CheckLargest(fp Fingerprint, r, w uint32, points int) error {
	if w == 0 || r >= w {
		return fmt.Errorf("%w: dp_rank %d of dp_size %d", ErrMismatch, r, w)
	}
	s, err := measure(fp)
	if err != nil {
		return err
	}
	if lb := s.log(points); lb > MaxLogBytes {
		return fmt.Errorf("%w: a schedule of %d points over %d datasets: a state's mixture log (up to %d entries each with such a schedule, and %d queued changes) could take %s, more than the %s it may (state.MaxLogBytes); give the schedule fewer points",
			ErrTooLarge, points, len(fp.Datasets), MaxMixLog, MaxQueued, mib(lb), mib(MaxLogBytes))
	}
	lo, hi := Owned(r, w, fp.LogicalShards)
	if cb := s.cursors(hi - lo); cb+MaxLogBytes > MaxBytes {
		return fmt.Errorf("%w: dp_rank %d of dp_size %d owns %d of logical_shards %d in each of %d datasets: its state could take %s with its mixture log, more than the %s a state may (state.MaxBytes), which the daemon must be able to take back; raise dp_size or lower logical_shards",
			ErrTooLarge, r, w, hi-lo, fp.LogicalShards, len(fp.Datasets), mib(cb+MaxLogBytes), mib(MaxBytes))
	}
	return nil
}

// FileBound is the most a rank file of a rank owning `owned` shards per
// dataset of fp can hold: the largest state such a rank could have
// written, its mixture log at MaxLogBytes (the bound every session's log
// was checked against at open; the file's schedules are not known before
// it is read).
func FileBound(fp Fingerprint, owned uint32) (int64, error) {
	s, err := measure(fp)
	if err != nil {
		return 0, err
	}
	return s.cursors(owned) + MaxLogBytes, nil
}

// SchedulePoints is the number of points of the largest schedule in a
// mixture log.
func SchedulePoints(m []MixChange) int {
	n := 0
	for _, c := range m {
		n = max(n, len(c.Schedule))
	}
	return n
}

// mib formats a byte count for people.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// MaxShardCursors bounds the shard cursors (owned shards times datasets) of
// a state a session may write: CheckLargest counts each at its worst,
// shardCursorBytes, and gives the cursors what MaxLogBytes leaves of
// MaxBytes. A request carrying more is refused before they are decoded.
const MaxShardCursors = (MaxBytes - MaxLogBytes) / shardCursorBytes

// shardCursorBytes is a shard cursor in a rank file at its longest: six
// columns of a 20-digit count and a comma (TestShardCursorBytes measures it).
const shardCursorBytes = 6 * 21
