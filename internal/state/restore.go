package state

import (
	"fmt"
	"slices"
)

// Restored is the merged state of a whole saved world: every logical shard's
// cursor, from whichever rank owned it.
type Restored struct {
	Step   uint64
	Shards map[ShardID]Shard
	// FromSize is the dp_size of the saved world (for a sharded state saved
	// before it was kept: the resuming world's).
	FromSize uint32
	// Mixture is the saved world's mixture log (the lowest rank's; every rank
	// keeps the same one). Empty when the files predate the log.
	Mixture []MixChange
	// MixturesDiffer is set when the ranks' current weights disagree; the
	// resumed ranks then treat the configured weights as a change.
	MixturesDiffer bool
	// Added names the datasets of the current config that the saved world
	// did not have: their shards start from fresh cursors.
	Added []string
}

// Merge checks the state files of one saved world against the current
// fingerprint and merges them. Every shard of every dataset must appear in
// exactly one file. names label the blobs in errors.
func Merge(cur Fingerprint, names []string, blobs [][]byte) (*Restored, error) {
	out := &Restored{Shards: map[ShardID]Shard{}}
	ranks := map[uint32]string{}
	for i, b := range blobs {
		fp, r, err := Decode(names[i], b)
		if err != nil {
			return nil, err
		}
		index, added, err := fp.Reconcile(cur)
		if err != nil {
			return nil, fmt.Errorf("%w: %s was saved from another corpus or config: %v", ErrMismatch, names[i], err)
		}
		out.Added = added
		r.Mixture = RemapMixture(r.Mixture, index, len(cur.Datasets))
		moved := make(map[ShardID]Shard, len(r.Shards))
		for id, sh := range r.Shards {
			if id.Dataset < 0 || id.Dataset >= len(index) {
				return nil, fmt.Errorf("%w: %s holds %v, outside its %d datasets", ErrMismatch, names[i], id, len(index))
			}
			moved[ShardID{Dataset: index[id.Dataset], Shard: id.Shard}] = sh
		}
		r.Shards = moved
		if out.FromSize != 0 && r.DPSize != out.FromSize {
			return nil, fmt.Errorf("%w: %s is of dp_size %d, other states of dp_size %d", ErrMismatch, names[i], r.DPSize, out.FromSize)
		}
		out.FromSize = r.DPSize
		if prev, dup := ranks[r.DPRank]; dup {
			return nil, fmt.Errorf("%w: %s and %s both hold dp_rank %d", ErrMismatch, prev, names[i], r.DPRank)
		}
		ranks[r.DPRank] = names[i]
		if i == 0 || r.DPRank == 0 {
			if i > 0 && !sameCurrent(out.Mixture, r.Mixture) {
				out.MixturesDiffer = true
			}
			out.Mixture = r.Mixture
		} else if !sameCurrent(out.Mixture, r.Mixture) {
			out.MixturesDiffer = true
		}
		if r.Step > out.Step {
			out.Step = r.Step
		}
		for id, s := range r.Shards {
			if id.Dataset < 0 || id.Dataset >= len(cur.Datasets) || id.Shard >= cur.LogicalShards {
				return nil, fmt.Errorf("%w: %s holds %v, outside %d datasets of %d shards", ErrMismatch, names[i], id, len(cur.Datasets), cur.LogicalShards)
			}
			if _, dup := out.Shards[id]; dup {
				return nil, fmt.Errorf("%w: %v is in more than one state file", ErrMismatch, id)
			}
			out.Shards[id] = s
		}
	}
	if len(ranks) != int(out.FromSize) {
		return nil, fmt.Errorf("%w: %d of %d ranks' states given: every rank of the saved world is needed", ErrMismatch, len(ranks), out.FromSize)
	}
	for d := range cur.Datasets {
		fresh := slices.Contains(out.Added, cur.Datasets[d].Name)
		for s := uint32(0); s < cur.LogicalShards; s++ {
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

// sameCurrent reports whether two mixture logs end in the same weights.
func sameCurrent(a, b []MixChange) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	return SameMixture(a[len(a)-1], b[len(b)-1])
}
