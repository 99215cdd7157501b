package main

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/dataloaderd/dataloaderd/internal/dcp"
	"github.com/dataloaderd/dataloaderd/internal/server"
	"github.com/dataloaderd/dataloaderd/internal/state"
)

// The bounds on what inspect reads of a DCP checkpoint's loader state: its
// version (a small int's pickle), its run part (a rank file but its
// cursors: the mixture log at most, and the fingerprint) and each cursor
// (a handful of int64s).
const (
	dcpVersionBytes = 1 << 10
	dcpRunBytes     = 2*state.MaxLogBytes + 1<<20 // its pickle: protocol 2 spells bytes as a latin1 string
	dcpCursorBytes  = 1 << 10
)

// dcpVersion is the version of the Loader's state dict inspect reads
// (clients/python's _state.py: {"version", "run", "shards"}).
const dcpVersion = 2

// inspectDCP reads the loader's state from a torch.distributed.checkpoint
// folder: the entries <prefix>.version, <prefix>.run and
// <prefix>.shards.<dataset>.<shard> that dcp.save of a Loader's state dict
// writes, under the key prefix (any; "" for the only one there is).
func inspectDCP(folder, prefix string) (inspection, error) {
	c, err := dcp.Open(folder)
	if err != nil {
		return inspection{}, err
	}
	defer c.Close()
	if prefix, err = loaderPrefix(c, prefix); err != nil {
		return inspection{}, err
	}
	where := fmt.Sprintf("checkpoint %s, the loader's state under %q", folder, prefix)
	sharded, err := readSharded(c, prefix)
	if err != nil {
		return inspection{}, fmt.Errorf("%s: %w", where, err)
	}
	fp, dpSize, ok, err := sharded.Saved()
	if err != nil {
		return inspection{}, fmt.Errorf("%s: %w", where, err)
	}
	in := inspection{Folder: folder, Form: formDCP, Prefix: prefix}
	if !ok { // saved before its first batch: no fingerprint to check the cursors by
		in.Fresh, in.Shards = true, shardsOf(fp, sharded.Shards)
		return in, nil
	}
	restored, err := sharded.Restore(fp, 0, 1) // every shard of every dataset, once
	if err != nil {
		return inspection{}, fmt.Errorf("%s: %w", where, err)
	}
	restored.FromSize = dpSize
	return summarize(in, fp, restored), nil
}

// loaderPrefix is the prefix of the loader's state among the checkpoint's
// entries: want if given (it must be there), else the only one there is.
func loaderPrefix(c *dcp.Checkpoint, want string) (string, error) {
	var found []string
	for _, fqn := range c.FQNs() {
		if p, ok := strings.CutSuffix(fqn, ".run"); ok {
			if _, ok := c.Entry(p + ".version"); ok {
				found = append(found, p)
			}
		}
	}
	switch {
	case want != "" && !slices.Contains(found, want):
		return "", fmt.Errorf("checkpoint %s holds no loader's state under %q (%s.run and %s.version); the loaders' states it holds: %s",
			c.Dir(), want, want, want, prefixesText(found))
	case want != "":
		return want, nil
	case len(found) == 0:
		return "", fmt.Errorf("checkpoint %s (torch.distributed.checkpoint, %d entries) holds no dataloaderd loader's state: no <prefix>.run beside <prefix>.version; save the Loader in the state dict, dcp.save({..., \"dataloader\": loader})",
			c.Dir(), len(c.FQNs()))
	case len(found) > 1:
		return "", fmt.Errorf("checkpoint %s holds the states of %d loaders, under %s: name one with --prefix", c.Dir(), len(found), prefixesText(found))
	}
	return found[0], nil
}

func prefixesText(ps []string) string {
	if len(ps) == 0 {
		return "none"
	}
	q := make([]string, len(ps))
	for i, p := range ps {
		q[i] = strconv.Quote(p)
	}
	return strings.Join(q, ", ")
}

// readSharded reads the state dict under prefix into the daemon's split
// state: the version checked, the run part, and every shard's cursor,
// read by ShardState's field order (server.ShardFromCursor).
func readSharded(c *dcp.Checkpoint, prefix string) (state.Sharded, error) {
	v, err := c.Object(prefix+".version", dcpVersionBytes)
	if err != nil {
		return state.Sharded{}, err
	}
	if v != int64(dcpVersion) {
		return state.Sharded{}, fmt.Errorf("%w: version %v; inspect reads version %d, a dataloaderd.Loader's state_dict()", state.ErrMismatch, v, dcpVersion)
	}
	run, err := c.Object(prefix+".run", dcpRunBytes)
	if err != nil {
		return state.Sharded{}, err
	}
	b, ok := run.([]byte)
	if !ok {
		return state.Sharded{}, fmt.Errorf("%w: %s.run holds a %T, not bytes", state.ErrMismatch, prefix, run)
	}
	out := state.Sharded{Run: b, Shards: map[state.ShardID]state.Shard{}}
	shards := prefix + ".shards."
	for _, fqn := range c.FQNs() {
		rest, ok := strings.CutPrefix(fqn, shards)
		if !ok {
			continue
		}
		id, err := shardID(rest)
		if err != nil {
			return state.Sharded{}, fmt.Errorf("%w: entry %q: %v", state.ErrMismatch, fqn, err)
		}
		t, err := c.Tensor(fqn, dcpCursorBytes)
		if err != nil {
			return state.Sharded{}, err
		}
		values, err := t.Int64s()
		if err == nil {
			out.Shards[id], err = server.ShardFromCursor(values)
		}
		if err != nil {
			return state.Sharded{}, fmt.Errorf("%w: entry %q: %v", state.ErrMismatch, fqn, err)
		}
	}
	return out, nil
}

// shardID reads "<dataset>.<shard>", the indices the state dict keys a
// cursor by.
func shardID(s string) (state.ShardID, error) {
	d, k, ok := strings.Cut(s, ".")
	di, err1 := strconv.ParseUint(d, 10, 31)
	ki, err2 := strconv.ParseUint(k, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return state.ShardID{}, fmt.Errorf("not <dataset>.<shard> after the prefix's shards: %q", s)
	}
	return state.ShardID{Dataset: int(di), Shard: uint32(ki)}, nil
}

// shardsOf lists a state's cursors for the report, by dataset and shard.
func shardsOf(fp state.Fingerprint, shards map[state.ShardID]state.Shard) []shardCursor {
	out := make([]shardCursor, 0, len(shards))
	for id, sh := range shards {
		name := strconv.Itoa(id.Dataset)
		if id.Dataset < len(fp.Datasets) {
			name = fp.Datasets[id.Dataset].Name
		}
		out = append(out, shardCursor{Dataset: name, Index: id.Dataset, Shard: id.Shard, Lines: sh.Lines,
			Epoch: sh.Window.Epoch, Pos: sh.Window.Pos, Offset: sh.Window.Offset, Taken: sh.Taken, Base: sh.Base})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Index != out[j].Index {
			return out[i].Index < out[j].Index
		}
		return out[i].Shard < out[j].Shard
	})
	return out
}
