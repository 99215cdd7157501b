package stream

import (
	"math/rand"
	"os"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/objstore/s3test"
	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// fetchedCorpus is a Megatron corpus of about tokens int32 tokens in
// documents of 1 to 1000 tokens, uploaded to srv as s3://fetched/meg/corpus;
// it returns the local prefix and the bytes of its .bin and .idx.
func fetchedCorpus(t *testing.T, srv *s3test.Server, tokens int) (string, int64) {
	t.Helper()
	rng := rand.New(rand.NewSource(3))
	var docs [][]int32
	for n := 0; n < tokens; {
		d := make([]int32, 1+rng.Intn(1000))
		for i := range d {
			d[i] = 1 + rng.Int31n(60000)
		}
		docs = append(docs, d)
		n += len(d)
	}
	dir := t.TempDir()
	prefix := testcorpus.Megatron(t, dir, "corpus", docs)
	var size int64
	for _, ext := range []string{".bin", ".idx"} {
		fi, err := os.Stat(prefix + ext)
		if err != nil {
			t.Fatal(err)
		}
		size += fi.Size()
	}
	srv.CreateBucket(t, "fetched")
	srv.PutDir(t, "fetched", "meg/", dir)
	return prefix, size
}

// TestObjectsFetchedPerEpoch reads one epoch of a corpus 8 times the node
// cache from the real S3 test server and reports the bytes fetched over the
// bytes of the corpus (each read once in an epoch), from the store's
// counters. Every token is read once (the epoch's tokens are counted).
func TestObjectsFetchedPerEpoch(t *testing.T) {
	srv := s3test.Start(t)
	const cache = 512 << 10
	_, corpusBytes := fetchedCorpus(t, srv, 1<<20) // 4 MiB of tokens: 8x the cache
	store := newStore(t, srv, "", objstore.Options{MemoryBytes: cache})
	ds := Dataset{Name: "meg", Path: "s3://fetched/meg/corpus", Format: "megatron", Weight: 1}
	cfg := Config{SeqLen: 511, BatchSize: 4, Seed: 7, LogicalShards: 4, EOS: 0, BOS: -1, Pad: 0,
		Epochs: 1, ShuffleWindow: 4, Datasets: []Dataset{ds}}
	tokens, _ := readEpoch(t, cfg, store, 1)
	if tokens == 0 {
		t.Fatal("the epoch served no token")
	}
	st := store.Stats()
	ratio := float64(st.FetchedBytes) / float64(corpusBytes)
	t.Logf("corpus %d bytes, cache %d bytes: fetched %d bytes in %d GETs, %.2f times the corpus (%d blocks missed, %d ahead, %d evictions)",
		corpusBytes, cache, st.FetchedBytes, st.Gets, ratio, st.Misses, st.Ahead, st.Evictions)
}
