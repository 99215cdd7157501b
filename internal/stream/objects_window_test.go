package stream

import (
	"math/rand"
	"reflect"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/objstore/s3test"
	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// TestObjectsWindowLoadsIndexAtOnce: a window of short documents over a
// Megatron index in object storage has its units' index entries and tokens
// brought into the cache in a few ranged GETs at once, before its walk
// reads them one by one (which fetched each block of the index it met, a
// round trip at a time: hundreds of GETs for a window of hundreds of
// documents). Each of 16 shards of 25,000 documents of about one token has
// an index of 75 blocks of 4 KiB, and a window walks about 230 or 920 of
// its documents (windows of 8 or 32 lines of 64 tokens); rank 0 of 1's
// first batch (4 lines: 4 windows opened, and every shard's next units
// fetched ahead) costs at most 6 GETs a shard either way, and its batches
// are those of the same files on disk.
func TestObjectsWindowLoadsIndexAtOnce(t *testing.T) {
	srv := s3test.Start(t)
	docs, _ := testcorpus.UniqueDocs(rand.New(rand.NewSource(13)), 400_000, 1, 1)
	dir := t.TempDir()
	prefix := testcorpus.Megatron(t, dir, "corpus", docs)
	srv.CreateBucket(t, "window")
	srv.PutDir(t, "window", "meg/", dir)
	local := Dataset{Name: "meg", Path: prefix, Format: "megatron", Weight: 1}
	remote := local
	remote.Path = "s3://window/meg/corpus"
	const shards = 16
	for _, lines := range []uint32{8, 32} {
		store := newStore(t, srv, "", objstore.Options{BlockSize: indexBlockBytes, MemoryBytes: 64 << 20})
		cfg := Config{SeqLen: 63, BatchSize: 4, Seed: 5, LogicalShards: shards, EOS: 0, BOS: -1, Pad: 0,
			Epochs: 1, ShuffleWindow: lines, Datasets: []Dataset{remote}}
		rc, err := OpenCorpusWith(cfg, objectResources(t, store))
		if err != nil {
			t.Fatal(err)
		}
		opened := store.Stats()
		rr, err := NewRank(rc, 0, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := run(t, rr, cfg, 1)
		first := store.Stats()
		gets := first.Gets - opened.Gets
		t.Logf("windows of %d lines: open %d GETs; first batch %d GETs, %d bytes", lines, opened.Gets, gets, first.FetchedBytes-opened.FetchedBytes)
		if most := int64(6 * shards); gets > most {
			t.Errorf("windows of %d lines: the first batch took %d GETs, want at most %d (6 a shard)", lines, gets, most)
		}
		lcfg := cfg
		lcfg.Datasets = []Dataset{local}
		lc, err := OpenCorpusWith(lcfg, objectResources(t, nil))
		if err != nil {
			t.Fatal(err)
		}
		lr, err := NewRank(lc, 0, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := run(t, lr, cfg, 1); !reflect.DeepEqual(got, want) {
			t.Errorf("windows of %d lines: the first batch from %s differs from the local files'", lines, remote.Path)
		}
		lc.Close()
		rc.Close()
	}
}
