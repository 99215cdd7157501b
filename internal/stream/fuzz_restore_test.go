package stream

import (
	"math/rand"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/state"
)

// FuzzRestore resumes a small real corpus from a state with one shard's
// fields forged: NewRank must refuse it, or the rank must serve batches
// without panicking or hanging. Before the state was checked at open, a
// position past the shard made NextBatch walk forever. make test runs it
// for a bounded time (fuzz-short).
func FuzzRestore(f *testing.F) {
	f.Add(uint8(0), uint64(1), uint64(0), uint64(1), uint64(3), uint64(1), uint64(0), uint64(5))
	f.Add(uint8(1), uint64(0), uint64(0), uint64(1000000), uint64(0), uint64(0), uint64(0), uint64(5))
	f.Add(uint8(2), uint64(1<<63), uint64(0), uint64(0), uint64(99999), uint64(1<<40), uint64(3), uint64(1<<64-1))
	dsets, _ := testCorpus(f, rand.New(rand.NewSource(4)))
	cfg := Config{SeqLen: 7, BatchSize: 2, Seed: 3, LogicalShards: 4, EOS: testEOS, BOS: -1, Pad: testPad, Epochs: 2,
		ShuffleWindow: 4, Datasets: dsets}
	c, err := OpenCorpus(cfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { c.Close() })
	base, err := NewRank(c, 0, 1, nil)
	if err != nil {
		f.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, err := base.NextBatch(batchBuf(cfg)); err != nil {
			f.Fatal(err)
		}
	}
	saved := base.State()
	f.Fuzz(func(t *testing.T, pick uint8, lines, epoch, pos, offset, taken, baseLines, step uint64) {
		st := saved.Clone()
		st.Step = step
		id := state.ShardID{Dataset: int(pick) % len(dsets), Shard: uint32(pick/4) % cfg.LogicalShards}
		st.Shards[id] = state.Shard{Lines: lines, Window: state.Cursor{Epoch: epoch, Pos: pos, Offset: offset}, Taken: taken, Base: baseLines}
		from := &state.Restored{Step: st.Step, Shards: st.Shards, FromSize: 1, Mixture: st.Mixture}
		rank, err := NewRank(c, 0, 1, from)
		if err != nil {
			return
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; i < 20; i++ {
				if p, err := rank.NextBatch(batchBuf(cfg)); err != nil || p.Lines == 0 {
					return
				}
			}
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("a rank resumed from %+v of %v at step %d serves nothing for 10 s", st.Shards[id], id, step)
		}
	})
}
