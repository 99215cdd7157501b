package stream

import (
	"fmt"
	"math/rand"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// runsCorpus is a Megatron dataset and a flat token file of unique token
// values, large enough for shards of several runs of MinRunTokens.
func runsCorpus(t *testing.T, rng *rand.Rand) ([]Dataset, map[int32]bool) {
	t.Helper()
	dir := t.TempDir()
	a, next := testcorpus.UniqueDocs(rng, 3200, 20, 1)
	c, next := testcorpus.UniqueDocs(rng, 300, 20, next)
	if next >= testPad {
		t.Fatalf("corpus too large for uint16 token values: %d", next)
	}
	testcorpus.Tokens(t, filepath.Join(dir, "c.bin"), c, testEOS)
	all := map[int32]bool{}
	for _, docs := range [][][]int32{a, c} {
		for _, d := range docs {
			for _, tok := range d {
				all[tok] = true
			}
		}
	}
	return []Dataset{
		{Name: "a", Path: testcorpus.Megatron(t, dir, "a", a), Format: "megatron", Weight: 1 + rng.Float64()*3},
		{Name: "c", Path: filepath.Join(dir, "c.bin"), Format: "tokens", Weight: 1 + rng.Float64()*3},
	}, all
}

// TestExactlyOnceRuns: with run_tokens, every token is served exactly once
// an epoch through saves, crashes and resumes on other world sizes; the
// shards read their units in runs (some shard has an order of runs).
func TestExactlyOnceRuns(t *testing.T) {
	for seed := int64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			ds, all := runsCorpus(t, rng)
			cfg := randomConfig(rng, ds)
			cfg.Epochs = uint32(1 + rng.Intn(2))
			cfg.RunTokens = MinRunTokens
			corpus, err := OpenCorpus(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer corpus.Close()
			if sh := corpus.datasets[0].shards[0]; sh.order == nil || len(sh.order.runs) < 2 {
				t.Fatalf("shard 0 of %d units is not read in runs of %d tokens", sh.n, cfg.RunTokens)
			}
			served := crashAndRescale(t, rng, cfg, corpus.Fingerprint(), 5, int(min(cfg.LogicalShards, 5)), 25,
				func(int, bool) *Corpus { return corpus })
			checkServed(t, served, all, int(cfg.Epochs))
		})
	}
}

// TestRunsDeterministic: two opens of a config with run_tokens serve the
// same batches; without run_tokens they differ; a state saved under one
// run_tokens is refused under another (its fingerprint says why).
func TestRunsDeterministic(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	ds, _ := runsCorpus(t, rng)
	cfg := randomConfig(rng, ds)
	cfg.RunTokens = MinRunTokens
	batches := func(cfg Config) ([][]int32, *Corpus) {
		c, err := OpenCorpus(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		r, err := NewRank(c, 0, 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		return run(t, r, cfg, 30), c
	}
	a, ca := batches(cfg)
	b, _ := batches(cfg)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two opens of one config with run_tokens served other batches")
	}
	off := cfg
	off.RunTokens = 0
	c, coff := batches(off)
	if reflect.DeepEqual(a, c) {
		t.Error("run_tokens changed nothing")
	}
	if diff := ca.Fingerprint().Diff(coff.Fingerprint()); len(diff) != 1 || !strings.Contains(diff[0], "run_tokens") {
		t.Errorf("fingerprints of run_tokens %d and 0 differ by %q, want run_tokens", cfg.RunTokens, diff)
	}
	bad := cfg
	bad.RunTokens = MinRunTokens - 1
	if _, err := Check(bad); err == nil || !strings.Contains(err.Error(), "run_tokens") {
		t.Errorf("run_tokens %d: %v, want refused", bad.RunTokens, err)
	}
}
