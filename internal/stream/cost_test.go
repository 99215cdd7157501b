package stream

import (
	"math/rand"
	"path/filepath"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// TestBatchCostByCause: a batch's time goes to the causes of the datasets
// its lines came from (tokenizing for text, reading for local token files)
// and packing; a skipped batch counts none; the names are the metrics'.
func TestBatchCostByCause(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewSource(3))
	text, _ := testcorpus.UniqueDocs(rng, 300, 40, 1)
	toks, _ := testcorpus.UniqueDocs(rng, 300, 40, 100_000)
	writeJSONL(t, filepath.Join(dir, "a.jsonl"), text, false, false)
	cfg := Config{SeqLen: 31, BatchSize: 8, Seed: 2, LogicalShards: 4, BOS: -1, Datasets: []Dataset{
		{Name: "a", Path: filepath.Join(dir, "a.jsonl"), Format: "jsonl", Weight: 1, Tokenizer: "ints"},
		{Name: "c", Path: testcorpus.Megatron(t, dir, "c", toks), Format: "megatron", Weight: 1},
	}}
	for _, mixed := range []bool{true, false} {
		c := cfg
		if !mixed {
			c.Datasets = cfg.Datasets[1:]
		}
		corpus := openInts(t, c, 1, 1<<20)
		if corpus.mixedCauses != mixed {
			t.Fatalf("mixedCauses %v for %d datasets", corpus.mixedCauses, len(c.Datasets))
		}
		rank, err := NewRank(corpus, 0, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		var sum Cost
		for i := 0; i < 20; i++ {
			p, err := rank.NextBatch(make([]int32, 8*32))
			if err != nil {
				t.Fatal(err)
			}
			for k, d := range p.Cost {
				sum[k] += d
			}
		}
		if sum[CauseRead] <= 0 || sum[CausePack] <= 0 || (sum[CauseTokenize] > 0) != mixed ||
			sum[CauseObjectStorage] != 0 || sum[CauseDeviceCopy] != 0 || sum[CauseOther] != 0 {
			t.Errorf("mixed %v: cost %v", mixed, sum)
		}
		if p, err := rank.SkipBatch(t.Context()); err != nil || p.Cost.Total() != 0 {
			t.Errorf("a skipped batch cost %v (%v)", p.Cost, err)
		}
	}
	if got := CauseNames(); len(got) != int(NumCauses) || got[CauseObjectStorage] != "object_storage" || CauseOther.String() != "other" {
		t.Errorf("cause names %v", got)
	}
	if c := (Cost{CauseRead: 2, CauseTokenize: 5}); c.Main() != CauseTokenize || c.Total() != 7 || (Cost{}).Main() != CausePack {
		t.Errorf("Main/Total of %v", c)
	}
	if causeOf("s3://b/k", false) != CauseObjectStorage || causeOf("s3://b/k", true) != CauseTokenize || causeOf("/d/x", false) != CauseRead {
		t.Error("causeOf")
	}
}
