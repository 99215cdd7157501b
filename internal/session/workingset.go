package session

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// admitWorkingSet adds what a new session of rank req.DPRank needs of the
// node's object cache (stream.Corpus.WorkingSet: its s3:// datasets'
// indices, and its shards' open windows and the next ones) to what the
// sessions open need, and reports it at open. Past the cache's budget the
// open is refused under Config.RequireWorkingSet, and logged as a warning
// otherwise: the cache then evicts blocks before they are read and fetches
// them again. leave takes the session's part back; it is a no-op for a
// session that reads nothing from object storage.
func (m *Manager) admitWorkingSet(corpus *stream.Corpus, req Request, log *zap.Logger) (leave func(), err error) {
	store := m.cfg.Objects
	if store == nil {
		return func() {}, nil
	}
	ws := corpus.WorkingSet([]uint32{req.DPRank}, req.DPSize, store.BlockSize())
	own := ws.Bytes
	if own == 0 {
		return func() {}, nil
	}
	budget := store.Budget()
	m.mu.Lock()
	node := m.workingSet + own
	if node > budget && m.cfg.RequireWorkingSet {
		m.mu.Unlock()
		return nil, fmt.Errorf("%w: the object cache of %d bytes is smaller than the %d bytes the sessions open on this node would need at once "+
			"with dp_rank %d (%d bytes: the s3:// datasets' indices, and each owned shard's open shuffle window and the next or the units fetched ahead); "+
			"raise the daemon's --object-cache-mb (or --object-cache-disk-mb with --object-cache-dir), or lower shuffle_window",
			ErrOverBudget, budget, node, req.DPRank, own)
	}
	m.workingSet = node
	m.metrics.workingSet.Set(float64(node))
	m.mu.Unlock()
	fields := []zap.Field{zap.Int64("working_set_bytes", own), zap.Int64("node_working_set_bytes", node), zap.Int64("object_cache_bytes", budget)}
	if node > budget {
		log.Warn("the object cache is smaller than the working set of the sessions open: blocks will be evicted before they are read and fetched again; "+
			"raise --object-cache-mb (or --object-cache-disk-mb with --object-cache-dir), or lower shuffle_window (docs/objects.md, \"Sizing the cache\")", fields...)
	} else {
		log.Info("object cache working set", fields...)
	}
	warnRefetched(ws, budget, store.BlockSize(), log)
	return func() {
		m.mu.Lock()
		m.workingSet -= own
		m.metrics.workingSet.Set(float64(m.workingSet))
		m.mu.Unlock()
	}, nil
}

// warnRefetched warns of each dataset in object storage whose epoch will
// fetch about a block per document (stream.DatasetWorkingSet.Refetched):
// read without run_tokens and larger than the cache.
func warnRefetched(ws stream.WorkingSet, budget, block int64, log *zap.Logger) {
	for _, d := range ws.Datasets {
		if !d.InObjects || !d.Refetched(ws.RunTokens, budget) {
			continue
		}
		log.Warn("a dataset in object storage larger than the cache, read without run_tokens: each epoch fetches about a cache block per document, "+
			"not each byte once; set the job's run_tokens (e.g. 4194304) to read its documents in runs (docs/objects.md, \"Reading in runs\")",
			zap.String("dataset", d.Name), zap.Int64("data_bytes", d.DataBytes), zap.Int64("mean_document_bytes", d.UnitBytes),
			zap.Int64("object_block_bytes", block), zap.Int64("object_cache_bytes", budget))
	}
}
