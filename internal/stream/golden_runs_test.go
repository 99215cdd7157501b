package stream

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// servedRunsDigest is the SHA-256 of every batch TestServedBytesGoldenRuns
// produces, recorded before the run ends were found by interpolation
// (a7abc6b, a bisection): how runs are cut is part of what is served, so
// the same seed and run_tokens must give the same batches on every daemon.
const servedRunsDigest = "2f9ac919bbe9f231a96049cdab40f8cdd7c28bb4a04f1b7770a98631229ed9f5"

// TestServedBytesGoldenRuns reads corpora of documents of random lengths
// (some longer than a run, some empty) in runs of run_tokens, on every
// rank of a small world, and compares a digest of the bytes with the one
// recorded above; it checks the shards were cut into runs at all.
func TestServedBytesGoldenRuns(t *testing.T) {
	h := sha256.New()
	var word [4]byte
	runs := 0
	for seed := int64(1); seed <= 6; seed++ {
		rng := rand.New(rand.NewSource(seed))
		docs := make([][]int32, 400+rng.Intn(400))
		next := int32(1)
		for i := range docs {
			n := rng.Intn(300)
			if i%37 == 0 {
				n = 4096 + rng.Intn(6000) // longer than a run
			}
			docs[i] = make([]int32, n)
			for j := range docs[i] {
				docs[i][j] = next
				next++
			}
		}
		prefix := testcorpus.Megatron(t, t.TempDir(), "runs", docs)
		cfg := Config{SeqLen: 63, BatchSize: 4, Seed: uint64(seed), LogicalShards: uint32(2 + rng.Intn(4)), BOS: -1,
			ShuffleWindow: uint32(1 + rng.Intn(4)), Epochs: 1, RunTokens: uint64(4096 + rng.Intn(8192)),
			Datasets: []Dataset{{Name: "runs", Path: prefix, Format: "megatron", Weight: 1}}}
		corpus, err := OpenCorpus(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range corpus.datasets {
			for _, sh := range d.shards {
				if sh.order != nil {
					runs++
				}
			}
		}
		w := uint32(1 + rng.Intn(3))
		for r := uint32(0); r < w; r++ {
			rank, err := NewRank(corpus, r, w, nil)
			if err != nil {
				t.Fatal(err)
			}
			batches := run(t, rank, cfg, 1000)
			fmt.Fprintf(h, "seed %d rank %d/%d: %d batches\n", seed, r, w, len(batches))
			for _, b := range batches {
				binary.LittleEndian.PutUint32(word[:], uint32(len(b)))
				h.Write(word[:])
				for _, tok := range b {
					binary.LittleEndian.PutUint32(word[:], uint32(tok))
					h.Write(word[:])
				}
			}
		}
		corpus.Close()
	}
	if runs == 0 {
		t.Fatal("no shard was cut into runs: the test reads nothing it means to")
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != servedRunsDigest {
		t.Fatalf("the served bytes of runs changed: digest %s, recorded %s", got, servedRunsDigest)
	}
}
