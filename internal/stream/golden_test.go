package stream

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand"
	"testing"
)

// servedDigest is the SHA-256 of every batch TestServedBytesGolden's ranks
// produce. It changes only when the bytes served change: a change of the
// read path (prefetching, copying, the order of its steps) must leave it
// as it is; a change of what is served must say so and update it.
const servedDigest = "ee3721e88a4bdd22bfaee70f112af80dc14bdf2f7f1d7b1d705f18aa861f4808"

// TestServedBytesGolden runs the randomized corpora and configurations of
// the promise tests (several datasets, weights, BOS or not, line-shuffle
// windows, few shards, so that a shard often serves two lines of one batch)
// on every rank of a small world, one epoch and unbounded, and compares a
// digest of the bytes with the one recorded above.
func TestServedBytesGolden(t *testing.T) {
	h := sha256.New()
	var word [4]byte
	for seed := int64(1); seed <= 24; seed++ {
		rng := rand.New(rand.NewSource(seed))
		ds, _ := testCorpus(t, rng)
		cfg := randomConfig(rng, ds)
		if seed%2 == 0 {
			cfg.Epochs = 0
		}
		corpus, err := OpenCorpus(cfg)
		if err != nil {
			t.Fatal(err)
		}
		w := uint32(1 + rng.Intn(3))
		for r := uint32(0); r < w; r++ {
			rank, err := NewRank(corpus, r, w, nil)
			if err != nil {
				t.Fatal(err)
			}
			batches := run(t, rank, cfg, 80)
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
	if got := hex.EncodeToString(h.Sum(nil)); got != servedDigest {
		t.Fatalf("the served bytes changed: digest %s, recorded %s", got, servedDigest)
	}
}
