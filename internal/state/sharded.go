package state

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Sharded is a rank's state split the way torch.distributed.checkpoint
// keeps it: a run-wide part that every rank of a world holds alike (the
// fingerprint, the step, the mixture log), and one cursor per logical shard
// the rank owns. Saved from every rank of a world, each shard's cursor is
// saved once, by its owner; loaded on a world of another size, each rank
// takes the cursors of the shards it owns now, wherever they were saved.
type Sharded struct {
	// Run is the run-wide part, encoded; empty for the state before the
	// first batch (every cursor is then zero).
	Run    []byte
	Shards map[ShardID]Shard
}

// run is the JSON form of Sharded.Run.
type run struct {
	Version     int         `json:"version"`
	Step        uint64      `json:"step"`
	Fingerprint Fingerprint `json:"fingerprint"`
	Mixture     []MixChange `json:"mixture,omitempty"`
	Skips       []SkipRange `json:"skips,omitempty"`
	// DPSize is the world's dp_size (0 in states saved before it was kept).
	DPSize uint32 `json:"dp_size,omitempty"`
	// Blocklists is the blocklist log (version 5).
	Blocklists []Blocklist `json:"blocklists,omitempty"`
}

// Split splits a rank's state.
func Split(fp Fingerprint, r Rank) (Sharded, error) {
	b, err := json.Marshal(run{Version: versionFor(fp, r), Step: r.Step, Fingerprint: fp, Mixture: r.Mixture, Skips: r.Skips, DPSize: r.DPSize,
		Blocklists: r.Blocklists})
	if err != nil {
		return Sharded{}, err
	}
	shards := make(map[ShardID]Shard, len(r.Shards))
	for id, s := range r.Shards {
		shards[id] = s
	}
	return Sharded{Run: b, Shards: shards}, nil
}

// Initial is the state of rank r of w before its first batch, split: no
// run part, and a zero cursor for each shard the rank owns (Owned) in each
// of datasets datasets of shards logical shards. Restore takes it as a
// fresh start; a client templates its state dict on it.
func Initial(datasets int, r, w, shards uint32) Sharded {
	lo, hi := Owned(r, w, shards)
	out := Sharded{Shards: make(map[ShardID]Shard, datasets*int(hi-lo))}
	for d := range datasets {
		for k := lo; k < hi; k++ {
			out.Shards[ShardID{Dataset: d, Shard: k}] = Shard{}
		}
	}
	return out
}

// ForRank is the part of a whole world's sharded state (every shard's
// cursor, as a torch.distributed.checkpoint folder holds it) that rank r of
// w loads: the run part and the cursors of the shards it owns (Owned) of
// shards logical shards, as a DCP load of its template picks them.
func (s Sharded) ForRank(r, w, shards uint32) Sharded {
	lo, hi := Owned(r, w, shards)
	out := Sharded{Run: s.Run, Shards: make(map[ShardID]Shard, len(s.Shards))}
	for id, sh := range s.Shards {
		if id.Shard >= lo && id.Shard < hi {
			out.Shards[id] = sh
		}
	}
	return out
}

// Restore checks a sharded state against the current fingerprint and the
// rank it is loaded into (rank r of w), and returns what that rank resumes
// from. It must hold the cursors of exactly the shards the rank owns, in
// every dataset: none missing, none of another rank's.
func (s Sharded) Restore(cur Fingerprint, r, w uint32) (*Restored, error) {
	out := &Restored{Shards: map[ShardID]Shard{}, FromSize: w}
	// The run part is a rank file's but its cursors: at most the largest
	// file of one shard a dataset.
	bound, err := FileBound(cur, 1)
	if err != nil {
		return nil, err
	}
	if int64(len(s.Run)) > bound {
		return nil, fmt.Errorf("%w: the run part of the state is %d bytes, more than the %d bytes (%s) it can take under this config; it was not decoded",
			ErrTooLarge, len(s.Run), bound, mib(bound))
	}
	if len(s.Run) == 0 {
		for _, id := range sortedIDs(s.Shards) {
			if sh := s.Shards[id]; sh != (Shard{}) {
				return nil, fmt.Errorf("%w: the state has no run part but %v has a cursor (%+v)", ErrMismatch, id, sh)
			}
		}
	} else {
		rn, err := decodeRun(s.Run)
		if err != nil {
			return nil, err
		}
		if d := rn.Fingerprint.Diff(cur); len(d) > 0 {
			return nil, fmt.Errorf("%w: the state was saved from another corpus or config: %s", ErrMismatch, strings.Join(d, "; "))
		}
		if err := CheckMixture("the state's ", rn.Mixture, cur.Names()); err != nil {
			return nil, err
		}
		if err := checkSkipLog(rn.Skips, rn.Step); err != nil {
			return nil, fmt.Errorf("%w: the state's %v", ErrMismatch, err)
		}
		if err := checkBlocklists(rn.Blocklists, rn.Step); err != nil {
			return nil, fmt.Errorf("%w: the state's %v", ErrMismatch, err)
		}
		out.Step, out.Mixture, out.Skips, out.Blocklists = rn.Step, rn.Mixture, rn.Skips, rn.Blocklists
		if rn.DPSize != 0 {
			out.FromSize = rn.DPSize
		}
	}
	lo, hi := Owned(r, w, cur.LogicalShards)
	for _, id := range sortedIDs(s.Shards) {
		sh := s.Shards[id]
		if id.Dataset < 0 || id.Dataset >= len(cur.Datasets) || id.Shard >= cur.LogicalShards {
			return nil, fmt.Errorf("%w: the state holds %v, outside %d datasets of %d shards", ErrMismatch, id, len(cur.Datasets), cur.LogicalShards)
		}
		if id.Shard < lo || id.Shard >= hi {
			return nil, fmt.Errorf("%w: the state holds dataset %q shard %d, which dp_rank %d of %d does not own (it owns shards %d to %d): "+
				"load each rank the state its own template asked for", ErrMismatch, cur.Datasets[id.Dataset].Name, id.Shard, r, w, lo, hi-1)
		}
		if sh.Base > sh.Lines {
			return nil, fmt.Errorf("%w: %v: base %d is past its %d lines", ErrMismatch, id, sh.Base, sh.Lines)
		}
		out.Shards[id] = sh
	}
	for d := range cur.Datasets {
		for k := lo; k < hi; k++ {
			if _, ok := out.Shards[ShardID{Dataset: d, Shard: k}]; !ok {
				return nil, fmt.Errorf("%w: the state lacks dataset %q shard %d, which dp_rank %d of %d owns", ErrMismatch, cur.Datasets[d].Name, k, r, w)
			}
		}
	}
	return out, nil
}

// decodeRun decodes a run part.
func decodeRun(b []byte) (run, error) {
	var rn run
	if err := json.Unmarshal(b, &rn); err != nil {
		return run{}, fmt.Errorf("%w: the run part of the state is not a dataloaderd state: %v", ErrMismatch, err)
	}
	if rn.Version < 2 || rn.Version > Version {
		return run{}, fmt.Errorf("%w: the run part of the state is version %d, this daemon reads 2 to %d", ErrMismatch, rn.Version, Version)
	}
	return rn, nil
}

// Saved is what the run part says of the world that saved the state: the
// fingerprint of its corpus and config, and its dp_size (0 when not kept).
// Restore under that fingerprint checks the rest. A state with no run part
// (before the first batch) says nothing: ok is false.
func (s Sharded) Saved() (fp Fingerprint, dpSize uint32, ok bool, err error) {
	if len(s.Run) == 0 {
		return Fingerprint{}, 0, false, nil
	}
	rn, err := decodeRun(s.Run)
	if err != nil {
		return Fingerprint{}, 0, false, err
	}
	return rn.Fingerprint, rn.DPSize, true, nil
}

// Key is a digest of the whole state, for comparing two of them.
func (s Sharded) Key() string {
	h := sha256.New()
	h.Write(s.Run)
	for _, id := range sortedIDs(s.Shards) {
		fmt.Fprintf(h, "\x00%d/%d=%+v", id.Dataset, id.Shard, s.Shards[id])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// sortedIDs lists a map's shards in (dataset, shard) order.
func sortedIDs(m map[ShardID]Shard) []ShardID {
	ids := make([]ShardID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool {
		if ids[i].Dataset != ids[j].Dataset {
			return ids[i].Dataset < ids[j].Dataset
		}
		return ids[i].Shard < ids[j].Shard
	})
	return ids
}
