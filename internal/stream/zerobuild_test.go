package stream

import (
	"math/rand"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/source"
	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// countingSource counts every access a source gets.
type countingSource struct {
	source.Source
	calls, tokens *atomic.Int64
}

func (c countingSource) Offset(u uint64) uint64 { c.calls.Add(1); return c.Source.Offset(u) }
func (c countingSource) UnitLen(u uint64) (uint64, error) {
	c.calls.Add(1)
	return c.Source.UnitLen(u)
}
func (c countingSource) Read(u, off uint64, dst []int32) error {
	c.calls.Add(1)
	c.tokens.Add(int64(len(dst)))
	return c.Source.Read(u, off, dst)
}

// firstBatchWork opens a corpus of docs documents and takes one batch,
// returning the source calls and the tokens read on the way.
func firstBatchWork(t *testing.T, docs int) (calls, tokens int64) {
	dir := t.TempDir()
	d, _ := testcorpus.UniqueDocs(rand.New(rand.NewSource(3)), docs, 200, 1)
	prefix := testcorpus.Megatron(t, dir, "web", d)
	var c, n atomic.Int64
	openSource = func(f files.Format, s source.Spec) (source.Source, error) {
		src, err := source.OpenFormat(f, s)
		if err != nil {
			return nil, err
		}
		return countingSource{Source: src, calls: &c, tokens: &n}, nil
	}
	defer func() { openSource = source.OpenFormat }()
	cfg := Config{SeqLen: 1023, BatchSize: 4, Seed: 1, LogicalShards: 64, EOS: 0, BOS: -1,
		Datasets: []Dataset{{Name: "web", Path: filepath.Clean(prefix), Format: "megatron", Weight: 1}}}
	corpus, err := OpenCorpus(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer corpus.Close()
	rank, err := NewRank(corpus, 0, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := rank.NextBatch(batchBuf(cfg)); err != nil || p.Lines != 4 {
		t.Fatalf("first batch: %d lines, %v", p.Lines, err)
	}
	return c.Load(), n.Load()
}

// TestZeroBuild: the work before the first batch does not grow with the
// corpus: a corpus 20 times larger costs the same tokens read and at most
// the extra steps of the shard-cutting binary search (log 20 per shard).
func TestZeroBuild(t *testing.T) {
	calls1, tok1 := firstBatchWork(t, 5_000)
	calls20, tok20 := firstBatchWork(t, 100_000)
	t.Logf("1x: %d source calls, %d tokens read; 20x: %d calls, %d tokens", calls1, tok1, calls20, tok20)
	if tok20 > tok1*2 {
		t.Fatalf("tokens read before the first batch: %d at 1x, %d at 20x", tok1, tok20)
	}
	if calls20 > calls1*3/2 {
		t.Fatalf("source calls before the first batch: %d at 1x, %d at 20x", calls1, calls20)
	}
}
