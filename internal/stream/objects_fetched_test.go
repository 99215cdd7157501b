package stream

import (
	"fmt"
	"math/rand"
	"os"
	"reflect"
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
// cache from the real S3 test server, and compares the bytes fetched (the
// store's counters) with the corpus's, each of whose bytes an epoch reads
// once. With run_tokens, a cache of the working set (Corpus.WorkingSet)
// fetches at most 1.1 times the corpus, and the batches are those of the
// local files. Without, each document costs the block around it, fetched again
// for the next document in it: many times the bytes read (an eighth of the
// epoch shows it).
func TestObjectsFetchedPerEpoch(t *testing.T) {
	srv := s3test.Start(t)
	const cache, block = 1 << 20, 16 << 10
	prefix, corpusBytes := fetchedCorpus(t, srv, 2<<20) // 8 MiB of tokens: 8x the cache
	for _, runTokens := range []uint64{128 << 10, 0} {
		t.Run(fmt.Sprintf("run_tokens=%d", runTokens), func(t *testing.T) {
			ds := Dataset{Name: "meg", Path: "s3://fetched/meg/corpus", Format: "megatron", Weight: 1}
			cfg := Config{SeqLen: 511, BatchSize: 4, Seed: 7, LogicalShards: 4, EOS: 0, BOS: -1, Pad: 0,
				Epochs: 1, ShuffleWindow: 4, RunTokens: runTokens, Datasets: []Dataset{ds}}
			budget := int64(cache)
			if runTokens > 0 {
				// A cache of the working set (the test's corpus:
				// 868 KiB) is enough; it holds up to 0.74 of it.
				budget = checkRunsAsLocal(t, srv, cfg, prefix, cache, block)
			}
			store := newStore(t, srv, "", objstore.Options{MemoryBytes: budget, BlockSize: block})
			read := corpusBytes
			if runTokens > 0 {
				if tokens, _ := readEpoch(t, cfg, store, 1); tokens == 0 {
					t.Fatal("the epoch served no token")
				}
			} else {
				read = readBatches(t, cfg, store, 128) // of the epoch's 1,024
			}
			st := store.Stats()
			ratio := float64(st.FetchedBytes) / float64(read)
			t.Logf("read %d bytes with a cache of %d: fetched %d bytes in %d GETs, %.2f times what was read (%d blocks missed, %d ahead, %d evictions)",
				read, budget, st.FetchedBytes, st.Gets, ratio, st.Misses, st.Ahead, st.Evictions)
			switch {
			case runTokens > 0 && ratio > 1.1:
				t.Errorf("fetched %.2f times the corpus with a cache that holds the working set, want at most 1.1", ratio)
			case runTokens == 0 && ratio < 2:
				t.Errorf("fetched %.2f times the bytes read, reading documents across each shard: docs/objects.md says many times", ratio)
			}
		})
	}
}

// readBatches reads n batches of rank 0 of 1 and returns the bytes of
// their tokens (4 a token, padding and separators included).
func readBatches(t *testing.T, cfg Config, store *objstore.Store, n int) int64 {
	t.Helper()
	corpus, err := OpenCorpusWith(cfg, objectResources(t, store))
	if err != nil {
		t.Fatal(err)
	}
	defer corpus.Close()
	rank, err := NewRank(corpus, 0, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	buf := batchBuf(cfg)
	var tokens int64
	for range n {
		p, err := rank.NextBatch(buf)
		if err != nil {
			t.Fatal(err)
		}
		tokens += int64(p.Lines * cfg.LineTokens())
	}
	return 4 * tokens
}

// checkRunsAsLocal checks that the working set of cfg's one rank fits the
// cache, and that its batches from the store are those of the local files;
// it returns the working set.
func checkRunsAsLocal(t *testing.T, srv *s3test.Server, cfg Config, prefix string, cache, block int64) int64 {
	t.Helper()
	store := newStore(t, srv, "", objstore.Options{MemoryBytes: cache, BlockSize: block})
	remote, err := OpenCorpusWith(cfg, objectResources(t, store))
	if err != nil {
		t.Fatal(err)
	}
	defer remote.Close()
	ws := remote.WorkingSet([]uint32{0}, 1, block)
	if ws.Bytes > cache || ws.Bytes == 0 {
		t.Fatalf("working set %d bytes, want within the cache's %d", ws.Bytes, cache)
	}
	lcfg := cfg
	lcfg.Datasets = []Dataset{{Name: "meg", Path: prefix, Format: "megatron", Weight: 1}}
	local, err := OpenCorpusWith(lcfg, objectResources(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	lr, err := NewRank(local, 0, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	rr, err := NewRank(remote, 0, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want, got := run(t, lr, cfg, 40), run(t, rr, cfg, 40); !reflect.DeepEqual(got, want) {
		t.Fatal("batches from objects differ from the local files'")
	}
	return ws.Bytes
}
