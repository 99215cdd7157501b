package stream

import (
	"math/rand"
	"os"
	"reflect"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/objstore/s3test"
	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// The indices of datasets in object storage are read by range: a test
// corpus's index several times the cache opens having fetched a small part
// of it, and serves the batches the same files on disk serve.

// indexCacheBytes is the cache of these tests: 1 MiB in 4 KiB blocks, a
// fraction of the files they open.
const (
	indexCacheBytes = 1 << 20
	indexBlockBytes = 4 << 10
)

// TestObjectsMegatronIndexByRange: a Megatron dataset of 500,000 documents,
// whose 10 MB index is ten times the cache, opens (it was refused when the
// index was read whole) having fetched the header and the entries that
// cutting 16 shards needs, a few blocks per shard (a twentieth of the index
// at most; 2.3% here); two ranks of 8 then serve the batches the same files
// on disk serve.
func TestObjectsMegatronIndexByRange(t *testing.T) {
	srv := s3test.Start(t)
	docs, _ := testcorpus.UniqueDocs(rand.New(rand.NewSource(11)), 500_000, 8, 1)
	dir := t.TempDir()
	prefix := testcorpus.Megatron(t, dir, "corpus", docs)
	srv.CreateBucket(t, "index")
	srv.PutDir(t, "index", "meg/", dir)
	local := Dataset{Name: "meg", Path: prefix, Format: "megatron", Weight: 1}
	remote := local
	remote.Path = "s3://index/meg/corpus"
	size := fileSize(t, prefix+".idx")
	// The header, then 16 shards' cuts: each a few probes near one place
	// of the offsets, and the first entries of its shard.
	checkOpenByRange(t, srv, local, remote, size, size/20)
}

// TestObjectsArrowFooterByRange: an Arrow IPC file of 100,000 documents in
// 7 record batches, three times the cache, opens (it was read whole, and
// refused over half the cache) having fetched its footer and, per record
// batch, the blocks of its metadata and of its first and last offsets, and
// the offsets that cutting 16 shards reads (5% of the file here); two ranks
// of 8 then serve the batches the same file on disk serves.
func TestObjectsArrowFooterByRange(t *testing.T) {
	srv := s3test.Start(t)
	docs, _ := testcorpus.UniqueDocs(rand.New(rand.NewSource(12)), 100_000, 8, 1)
	dir := t.TempDir()
	path := testcorpus.Arrow(t, dir, "corpus", docs, 16384)
	srv.CreateBucket(t, "footer")
	srv.PutFile(t, "footer", "arrow/corpus.arrow", path)
	local := Dataset{Name: "arrow", Path: path, Format: "arrow", Weight: 1}
	remote := local
	remote.Path = "s3://footer/arrow/corpus.arrow"
	// Per record batch, its metadata's block and its last offset's (the
	// first lies just after the metadata); the footer's; per logical shard,
	// the blocks of the offsets that cutting it reads.
	batches, shards := int64(7), int64(16)
	checkOpenByRange(t, srv, local, remote, fileSize(t, path), (2*batches+2+2*shards)*indexBlockBytes)
}

// checkOpenByRange opens remote with a cache of indexCacheBytes and checks
// that it fetched at most most bytes (of the size bytes of the file read by
// range), then that the first batches of two ranks of 8 equal those of
// local (a few, of ranks of 2 shards each: with a cache this small, each
// document read and prefetched costs GETs).
func checkOpenByRange(t *testing.T, srv *s3test.Server, local, remote Dataset, size, most int64) {
	t.Helper()
	if size <= 2*indexCacheBytes {
		t.Fatalf("the file is %d bytes: want it larger than the %d-byte cache, as read whole it was refused", size, indexCacheBytes)
	}
	store := newStore(t, srv, "", objstore.Options{BlockSize: indexBlockBytes, MemoryBytes: indexCacheBytes})
	cfg := Config{SeqLen: 63, BatchSize: 4, Seed: 3, LogicalShards: 16, EOS: 0, BOS: -1, Pad: 0,
		Epochs: 1, ShuffleWindow: 4, Datasets: []Dataset{remote}}
	rc, err := OpenCorpusWith(cfg, objectResources(t, store))
	if err != nil {
		t.Fatalf("opening %s with a cache of %d bytes: %v", remote.Path, indexCacheBytes, err)
	}
	defer rc.Close()
	opened := store.Stats()
	t.Logf("open: %d of the file's %d bytes fetched in %d GETs", opened.FetchedBytes, size, opened.Gets)
	if opened.FetchedBytes > most {
		t.Fatalf("open fetched %d bytes (%d GETs): want at most %d of the %d-byte file", opened.FetchedBytes, opened.Gets, most, size)
	}
	lcfg := cfg
	lcfg.Datasets = []Dataset{local}
	lc, err := OpenCorpusWith(lcfg, objectResources(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	for r := uint32(0); r < 2; r++ {
		lr, err := NewRank(lc, r, 8, nil)
		if err != nil {
			t.Fatal(err)
		}
		rr, err := NewRank(rc, r, 8, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want, got := run(t, lr, cfg, 3), run(t, rr, cfg, 3); !reflect.DeepEqual(got, want) {
			t.Fatalf("rank %d of 8: batches from %s differ from the local file's", r, remote.Path)
		}
	}
	t.Logf("after 3 batches of 2 ranks of 8: %+v", store.Stats())
}

// fileSize is the size of the file at path.
func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size()
}
