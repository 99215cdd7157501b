// Package state is the loader state model: per logical shard a cursor into the
// shard's token stream, per rank the shards it owns, and the versioned file a
// rank saves into a checkpoint folder. The state holds no token data, so it is
// kilobytes whatever the corpus, the buffers or the number of steps.
//
// Everything else a rank needs (dataset counters for mixing, which shard comes
// next, which lines of a shuffle window were served) is derived from these
// cursors, so restoring them onto any world size restores the stream exactly.
package state

import (
	"fmt"
	"slices"

	"github.com/dataloaderd/dataloaderd/internal/errkind"
)

// Version is the newest version of the state file format this package
// writes and reads. Version 5 is written only for a state that logs skipped
// ranges of steps (Rank.Skips) or blocklists (Rank.Blocklists): a daemon
// before them would read the state, drop the log, and serve the batches of
// a pending range or the documents a blocklist names. Version 4 is written
// only for a job that reads its units in runs (its fingerprint's run_tokens
// is not 0): a daemon before runs reads versions up to 3 and so refuses such
// a state, rather than ignore the field and apply cursors of the run order
// to the plain one. Version 3 adds the changes of weights queued for later
// batches to the mixture log (entries past the state's step). Version 1
// files (no mixing bases, no mixture log) and version 2 files (no queued
// changes) are still read.
const Version = 5

// versionFor is the version rank r's state of fingerprint fp is written as: the
// oldest that holds it.
func versionFor(fp Fingerprint, r Rank) int {
	if len(r.Skips) > 0 || len(r.Blocklists) > 0 {
		return 5
	}
	if fp.RunTokens != 0 {
		return 4
	}
	return 3
}

// ErrMismatch marks a saved state that does not belong to the current corpus
// and config, or a set of state files that does not cover every shard once.
var ErrMismatch = errkind.New(errkind.FailedPrecondition, "state does not match")

// Cursor is a position in a shard's token stream: the unit at position Pos of
// epoch Epoch's permutation, Offset tokens into it (separators included).
type Cursor struct {
	Epoch  uint64
	Pos    uint64
	Offset uint64
}

// Less orders cursors by stream position.
func (c Cursor) Less(o Cursor) bool {
	if c.Epoch != o.Epoch {
		return c.Epoch < o.Epoch
	}
	if c.Pos != o.Pos {
		return c.Pos < o.Pos
	}
	return c.Offset < o.Offset
}

// Shard is the state of one logical shard: Lines lines of its stream have been
// served in all; the current line-shuffle window starts at Window and Taken of
// its lines are out (which ones follows from the window's keyed order). Base
// is Lines when the mixing weights in effect took effect: mixing counts the
// lines served since then, so a change of weights steers the lines after it
// and does not try to repay the past.
type Shard struct {
	Lines  uint64
	Window Cursor
	Taken  uint64
	Base   uint64
}

// ShardID names a logical shard: the dataset's index in the config and the
// shard's index within the dataset.
type ShardID struct {
	Dataset int
	Shard   uint32
}

func (id ShardID) String() string { return fmt.Sprintf("dataset %d shard %d", id.Dataset, id.Shard) }

// Owned returns the logical shards [lo, hi) that data-parallel rank r of w owns
// in every dataset: contiguous blocks, as even as the division allows.
func Owned(r, w, shards uint32) (lo, hi uint32) {
	lo = uint32(uint64(r) * uint64(shards) / uint64(w))
	hi = uint32(uint64(r+1) * uint64(shards) / uint64(w))
	return lo, hi
}

// Rank is the state of one data-parallel rank after its client consumed
// batch Step: the cursors of the shards it owns, in every dataset.
type Rank struct {
	DPRank uint32
	DPSize uint32
	Step   uint64
	// Shards holds the owned shards of every dataset.
	Shards map[ShardID]Shard
	// Mixture is the log of mixing weights, in step order: the entries at
	// or before Step are the history (the last of them in effect), those
	// after it the changes queued for later batches (see Queued). Empty in
	// states read from version 1 files.
	Mixture []MixChange
	// Skips is the log of ranges of steps skipped (skip_steps), in step
	// order: those whose last step is at or before Step passed, the others
	// pending. Empty in states read from files before version 5.
	Skips []SkipRange
	// Blocklists is the log of blocklists put in effect (blocklist.go),
	// the same in every rank of a world.
	Blocklists []Blocklist
}

// Clone returns a deep copy.
func (r Rank) Clone() Rank {
	c := r
	c.Shards = make(map[ShardID]Shard, len(r.Shards))
	for k, v := range r.Shards {
		c.Shards[k] = v
	}
	c.Mixture = CloneMixture(r.Mixture)
	c.Skips = slices.Clone(r.Skips)
	c.Blocklists = slices.Clone(r.Blocklists)
	return c
}
