package session

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/state"
	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// State is session id's rank state after step, encoded as a state file
// holds it. The step must be one the session's consumers have been handed
// and not older than the last one they all released.
func (m *Manager) State(uid uint32, id string, step uint64) (Snapshot, error) {
	ss, err := m.lookup(uid, id)
	if err != nil {
		return Snapshot{}, err
	}
	st, err := ss.pipeline.State(step)
	if err != nil {
		return Snapshot{}, err
	}
	b, err := state.Encode(ss.pipeline.Fingerprint(), st)
	if err != nil {
		return Snapshot{}, err
	}
	sharded, err := state.Split(ss.pipeline.Fingerprint(), st)
	if err != nil {
		return Snapshot{}, err
	}
	return Snapshot{State: b, DPRank: st.DPRank, DPSize: st.DPSize, Sharded: sharded}, nil
}

// StateTemplate is the state of rank dpRank of dpSize before its first
// batch under cfg, split by shard (state.Initial): the shards the rank owns,
// every cursor zero. The config and rank are checked as an open checks
// them, with the same errors; no session is opened and no file is read.
func StateTemplate(cfg stream.Config, dpRank, dpSize uint32) (state.Sharded, error) {
	checked, err := checkJob(cfg, dpRank, dpSize)
	if err != nil {
		return state.Sharded{}, err
	}
	// A rank of 2^20 shards in each of many datasets would be a reply of
	// gigabytes: an open refuses such a state, and so does its template.
	if err := checkConfigStateSize(checked, dpRank, dpSize); err != nil {
		return state.Sharded{}, err
	}
	return state.Initial(len(cfg.Datasets), dpRank, dpSize, cfg.LogicalShards), nil
}

// Save writes session id's rank state after step into
// <folder>/dataloader/rank-<r>-of-<W>.json, atomically, with the daemon's
// own rights on the folder.
func (m *Manager) Save(uid uint32, id string, step uint64, folder string) (Saved, error) {
	return m.save(uid, nil, id, step, folder)
}

// SaveFor is Save with the rights of caller, whose session it must be, on
// the folder (files.Folder.For).
func (m *Manager) SaveFor(caller files.Caller, id string, step uint64, folder string) (Saved, error) {
	return m.save(caller.UID, &caller, id, step, folder)
}

func (m *Manager) save(uid uint32, caller *files.Caller, id string, step uint64, folder string) (Saved, error) {
	start := time.Now()
	ss, err := m.lookup(uid, id)
	if err != nil {
		return Saved{}, err
	}
	if folder == "" {
		return Saved{}, fmt.Errorf("%w: folder is empty", ErrBadRequest)
	}
	dir, err := m.roots.Folder("save folder", folder)
	if err != nil {
		return Saved{}, err
	}
	if caller != nil {
		dir = dir.For(*caller)
	}
	st, err := ss.pipeline.State(step)
	if err != nil {
		return Saved{}, err
	}
	path, n, err := state.Save(dir, ss.pipeline.Fingerprint(), st)
	if err != nil {
		return Saved{}, err
	}
	m.metrics.stateSave.Observe(time.Since(start).Seconds())
	m.metrics.stateBytes.Observe(float64(n))
	ss.log.Info("state saved", zap.String("path", path), zap.Uint64("step", st.Step), zap.Int("bytes", n))
	return Saved{Path: path, Bytes: n}, nil
}

// SetWeights changes session id's mixing weights (by dataset name, every
// dataset of the job) from batch after+1 on; taken is the last step the
// asking consumer has read. It returns the pipeline's generation after the
// change: batches of an older one handed out on a stream are stale.
func (m *Manager) SetWeights(ctx context.Context, uid uint32, id string, after, taken uint64, weights map[string]float64) (uint64, error) {
	ss, err := m.lookup(uid, id)
	if err != nil {
		return 0, err
	}
	ws, err := stream.WeightsByName("set_weights", "dataset of the job", ss.corpus.Config().Datasets, weights)
	if err != nil {
		return 0, err
	}
	if err := ss.pipeline.SetWeights(ctx, after, taken, ws); err != nil {
		return 0, err
	}
	ss.touch()
	return ss.pipeline.Generation(), nil
}

// SkipSteps logs the steps first to last of session id as skipped: their
// batches are made and dropped (stream.Pipeline.SkipSteps); taken is the
// last step the asking consumer has read. It returns the pipeline's
// generation after the change (batches of an older one handed out on a
// stream past first-1 are stale) and the ranges pending after taken.
func (m *Manager) SkipSteps(ctx context.Context, uid uint32, id string, first, last, taken uint64) (uint64, []state.SkipRange, error) {
	ss, err := m.lookup(uid, id)
	if err != nil {
		return 0, nil, err
	}
	pending, err := ss.pipeline.SkipSteps(ctx, state.SkipRange{First: first, Last: last}, taken)
	if err != nil {
		return 0, nil, err
	}
	ss.touch()
	ss.log.Info("steps skipped", zap.Uint64("first", first), zap.Uint64("last", last))
	return ss.pipeline.Generation(), pending, nil
}
