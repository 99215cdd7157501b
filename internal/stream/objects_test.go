package stream

import (
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/objstore/s3test"
	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// objectCorpus is one dataset of every format, written to a local folder and
// uploaded under s3://bucket/corpus/, with its unique token values.
type objectCorpus struct {
	dir    string
	local  []Dataset // the same datasets by their local paths
	remote []Dataset // by s3:// paths: prefixes, objects, globs
	all    map[int32]bool
}

func newObjectCorpus(t *testing.T, srv *s3test.Server, bucket string, rng *rand.Rand) *objectCorpus {
	t.Helper()
	dir := t.TempDir()
	c := &objectCorpus{dir: dir, all: map[int32]bool{}}
	next := int32(1)
	docs := func(n, maxLen int) [][]int32 {
		d, nx := testcorpus.UniqueDocs(rng, n, maxLen, next)
		next = nx
		for _, doc := range d {
			for _, tok := range doc {
				c.all[tok] = true
			}
		}
		return d
	}
	mkdir := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	meg := docs(60, 40)
	testcorpus.Megatron(t, mkdir("meg"), "part-0", meg[:30])
	testcorpus.Megatron(t, filepath.Join(dir, "meg"), "part-1", meg[30:])
	testcorpus.Tokens(t, filepath.Join(mkdir("flat"), "x.bin"), docs(40, 30), testEOS)
	testcorpus.Arrow(t, mkdir("arrow"), "x", docs(30, 30), 7)
	testcorpus.JSONL(t, filepath.Join(mkdir("plain"), "x.jsonl"), docs(120, 40), testcorpus.Plain)
	mkdir("gz")
	for i := range 4 {
		testcorpus.JSONL(t, filepath.Join(dir, "gz", fmt.Sprintf("%d.jsonl.gz", i)), docs(10, 30), testcorpus.Gzip)
	}
	mkdir("zst")
	for i := range 4 {
		testcorpus.JSONL(t, filepath.Join(dir, "zst", fmt.Sprintf("%d.jsonl.zst", i)), docs(10, 30), testcorpus.Zstd)
	}
	testcorpus.Parquet(t, filepath.Join(mkdir("pq"), "x.parquet"), docs(32, 30), 4)
	if next >= testPad {
		t.Fatalf("corpus too large for uint16 token values: %d", next)
	}
	srv.CreateBucket(t, bucket)
	srv.PutDir(t, bucket, "corpus/", dir)
	url := func(key string) string { return "s3://" + bucket + "/corpus/" + key }
	type entry struct{ name, format, local, remote string }
	for _, e := range []entry{
		{"meg", "megatron", "meg", "meg"},                    // a prefix, listed
		{"flat", "tokens", "flat/x.bin", "flat/x.bin"},       // an object
		{"arrow", "arrow", "arrow/x.arrow", "arrow/*.arrow"}, // a glob
		{"plain", "jsonl", "plain/x.jsonl", "plain/x.jsonl"}, // plain JSONL, in blocks
		{"gz", "jsonl", "gz", "gz/"},                         // gzip, two objects
		{"zst", "jsonl", "zst", "zst/*.jsonl.zst"},           // zstd
		{"pq", "parquet", "pq/x.parquet", "pq/x.parquet"},    // row groups by range
	} {
		d := Dataset{Name: e.name, Format: e.format, Weight: 1 + float64(rng.Intn(3))}
		if e.format == "jsonl" || e.format == "parquet" {
			d.Tokenizer = "ints"
		}
		l, r := d, d
		l.Path, r.Path = filepath.Join(dir, e.local), url(e.remote)
		c.local = append(c.local, l)
		c.remote = append(c.remote, r)
	}
	return c
}

// objectResources are stream resources that read s3:// paths through store,
// confined to roots.
func objectResources(t testing.TB, store *objstore.Store, roots ...string) *Resources {
	t.Helper()
	res := NewResources(2, 1<<20, nil)
	t.Cleanup(func() { res.Close() })
	res.addTokenizer("ints", testcorpus.Ints{})
	r, err := files.NewRoots(roots)
	if err != nil {
		t.Fatal(err)
	}
	res.Roots = r.WithObjects(store)
	return res
}

// newStore opens an object store reaching srv (or endpoint, when not empty)
// through the standard AWS environment.
func newStore(t testing.TB, srv *s3test.Server, endpoint string, opts objstore.Options) *objstore.Store {
	t.Helper()
	if endpoint == "" {
		endpoint = srv.Endpoint
	}
	for _, kv := range srv.EnvFor(endpoint) {
		name, value, _ := strings.Cut(kv, "=")
		t.Setenv(name, value)
	}
	store, err := objstore.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

// objectConfig is a random config over ds, with text units small enough
// (1000 bytes) that every dataset has a unit for each of 4 logical shards.
func objectConfig(t *testing.T, rng *rand.Rand, ds []Dataset) Config {
	old := textBlockBytes
	textBlockBytes = 1000
	t.Cleanup(func() { textBlockBytes = old })
	cfg := randomConfig(rng, ds)
	cfg.LogicalShards = 4
	return cfg
}

// TestObjectsExactlyOnce: datasets of every format read from a real
// S3-compatible server serve, rank by rank, exactly the batches the same
// datasets on local disk serve, and every token exactly once through saves,
// lost batches and a 2 -> 3 rescale (then random world sizes).
func TestObjectsExactlyOnce(t *testing.T) {
	srv := s3test.Start(t)
	for seed := int64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			bucket := fmt.Sprintf("once-%d", seed)
			oc := newObjectCorpus(t, srv, bucket, rng)
			store := newStore(t, srv, "", objstore.Options{BlockSize: 64 << 10, MemoryBytes: 1 << 20})
			cfg := objectConfig(t, rng, oc.remote)
			lcfg := cfg
			lcfg.Datasets = oc.local
			remote, err := OpenCorpusWith(cfg, objectResources(t, store, "s3://"+bucket+"/corpus"))
			if err != nil {
				t.Fatal(err)
			}
			defer remote.Close()
			local, err := OpenCorpusWith(lcfg, objectResources(t, nil))
			if err != nil {
				t.Fatal(err)
			}
			defer local.Close()

			// The same batches, rank by rank, from objects as from files.
			for r := uint32(0); r < 2; r++ {
				lr, err := NewRank(local, r, 2, nil)
				if err != nil {
					t.Fatal(err)
				}
				rr, err := NewRank(remote, r, 2, nil)
				if err != nil {
					t.Fatal(err)
				}
				want, got := run(t, lr, cfg, 30), run(t, rr, cfg, 30)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("rank %d of 2: batches from objects differ from the local files'", r)
				}
			}

			// Exactly once: 2 ranks, a save, 3 ranks, random worlds after.
			worlds := func(round int) int {
				if round < 2 {
					return round + 2
				}
				return 1 + rng.Intn(4)
			}
			served := crashAndRescaleWorlds(t, rng, cfg, remote.Fingerprint(), 4, worlds, 20,
				func(int, bool) *Corpus { return remote })
			checkServed(t, served, oc.all, int(cfg.Epochs))
			st := store.Stats()
			if st.Gets == 0 || st.FetchedBytes == 0 {
				t.Fatalf("no ranged GETs counted: %+v", st)
			}
			t.Logf("store: %+v", st)
		})
	}
}

// TestObjectsOncePerNode: the ranks of a job read every object once
// between them. With a cache that holds the corpus, the requests and bytes
// fetched for four ranks are those for one.
func TestObjectsOncePerNode(t *testing.T) {
	srv := s3test.Start(t)
	rng := rand.New(rand.NewSource(9))
	oc := newObjectCorpus(t, srv, "node", rng)
	fetch := func(world int) objstore.Stats {
		store := newStore(t, srv, "", objstore.Options{BlockSize: 64 << 10})
		cfg := objectConfig(t, rand.New(rand.NewSource(3)), oc.remote)
		readEpoch(t, cfg, store, world)
		return store.Stats()
	}
	one, four := fetch(1), fetch(4)
	var size int64
	filepath.Walk(oc.dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			size += info.Size()
		}
		return nil
	})
	t.Logf("1 rank: %+v; 4 ranks: %+v; corpus %d bytes", one, four, size)
	if four.Gets != one.Gets || four.FetchedBytes != one.FetchedBytes {
		t.Fatalf("4 ranks fetched %d bytes in %d GETs, 1 rank %d bytes in %d GETs: want the same",
			four.FetchedBytes, four.Gets, one.FetchedBytes, one.Gets)
	}
	if one.FetchedBytes > size {
		t.Fatalf("fetched %d bytes of a %d-byte corpus: some bytes were fetched twice", one.FetchedBytes, size)
	}
}

// TestObjectsServerRestart: the server stops in the middle of a run and
// comes back; reads wait through the retries and the run serves every
// token exactly once.
func TestObjectsServerRestart(t *testing.T) {
	srv := s3test.Start(t)
	rng := rand.New(rand.NewSource(5))
	oc := newObjectCorpus(t, srv, "restart", rng)
	// A cache too small for the corpus: reads keep going to the server.
	store := newStore(t, srv, "", objstore.Options{BlockSize: 4 << 10, MemoryBytes: 16 << 10, RetryFor: time.Minute})
	cfg := objectConfig(t, rng, oc.remote)
	cfg.Epochs = 2
	corpus, err := OpenCorpusWith(cfg, objectResources(t, store))
	if err != nil {
		t.Fatal(err)
	}
	defer corpus.Close()
	rank, err := NewRank(corpus, 0, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	served := map[int32]int{}
	buf := batchBuf(cfg)
	for i := 0; ; i++ {
		if i == 20 {
			srv.Stop()
			go func() {
				time.Sleep(1500 * time.Millisecond)
				srv.Restart(t)
			}()
		}
		p, err := rank.NextBatch(buf)
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		if p.Lines == 0 {
			break
		}
		count(served, buf[:p.Lines*cfg.LineTokens()])
	}
	checkServed(t, served, oc.all, 2)
	if st := store.Stats(); st.Retries == 0 {
		t.Fatalf("no request was retried while the server was down: %+v", st)
	}
}

// TestObjectsSlowDown: a proxy answers 503 SlowDown to a third of the
// requests; the loader backs off and retries, and serves every token once.
func TestObjectsSlowDown(t *testing.T) {
	srv := s3test.Start(t)
	rng := rand.New(rand.NewSource(6))
	oc := newObjectCorpus(t, srv, "slow", rng)
	proxy := s3test.NewFaultProxy(t, srv.Endpoint, 0.33, 1)
	store := newStore(t, srv, proxy.URL, objstore.Options{BlockSize: 16 << 10, MemoryBytes: 256 << 10})
	cfg := objectConfig(t, rng, oc.remote)
	corpus, err := OpenCorpusWith(cfg, objectResources(t, store))
	if err != nil {
		t.Fatal(err)
	}
	defer corpus.Close()
	served := map[int32]int{}
	for r := uint32(0); r < 2; r++ {
		rank, err := NewRank(corpus, r, 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range run(t, rank, cfg, 1<<20) {
			count(served, b)
		}
	}
	checkServed(t, served, oc.all, int(cfg.Epochs))
	st := store.Stats()
	if proxy.Refused() == 0 || st.Retries < proxy.Refused() {
		t.Fatalf("proxy refused %d requests, store retried %d: %+v", proxy.Refused(), st.Retries, st)
	}
	t.Logf("refused %d of %d requests; store %+v", proxy.Refused(), proxy.Requests(), st)
}

// TestObjectsRefused: a dataset outside the allowed bucket prefixes is
// refused before any request; an object that cannot be read (wrong
// credentials) fails with an error that names it and not the secret.
func TestObjectsRefused(t *testing.T) {
	srv := s3test.Start(t)
	oc := newObjectCorpus(t, srv, "conf", rand.New(rand.NewSource(2)))
	store := newStore(t, srv, "", objstore.Options{})
	cfg := objectConfig(t, rand.New(rand.NewSource(2)), oc.remote[:1])
	_, err := OpenCorpusWith(cfg, objectResources(t, store, "s3://conf/other", "/data"))
	if !errors.Is(err, files.ErrOutsideRoots) || !strings.Contains(err.Error(), "s3://conf/corpus/meg") {
		t.Fatalf("dataset outside the roots: got %v", err)
	}
	if st := store.Stats(); st.Requests != 0 {
		t.Fatalf("a refused dataset made %d requests", st.Requests)
	}
	// The right key, the wrong secret.
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong-"+srv.SecretKey)
	bad, err := objstore.New(objstore.Options{RetryFor: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	_, err = OpenCorpusWith(cfg, objectResources(t, bad))
	if err == nil || !strings.Contains(err.Error(), "s3://conf/corpus/meg") {
		t.Fatalf("wrong credentials: got %v, want an error naming the path", err)
	}
	if strings.Contains(err.Error(), srv.SecretKey) {
		t.Fatalf("the error shows the secret key: %v", err)
	}
	t.Logf("wrong credentials: %v", err)
}

// TestObjectsFailLoudly: when the store is gone for longer than the
// retries, a read fails with an error naming the object; a flat token
// file whose separators cannot be fetched is an error, never a unit
// boundary made up.
func TestObjectsFailLoudly(t *testing.T) {
	srv := s3test.Start(t)
	rng := rand.New(rand.NewSource(8))
	docs, _ := testcorpus.UniqueDocs(rng, 2000, 60, 1) // 120 KB of uint16 tokens
	path := filepath.Join(t.TempDir(), "x.bin")
	testcorpus.Tokens(t, path, docs, testEOS)
	srv.CreateBucket(t, "gone")
	srv.PutFile(t, "gone", "flat/x.bin", path)
	// A cache of 4 blocks of 4 KiB: the file cannot be in it.
	store := newStore(t, srv, "", objstore.Options{BlockSize: 4 << 10, MemoryBytes: 16 << 10, RetryFor: 300 * time.Millisecond})
	cfg := objectConfig(t, rng, []Dataset{{Name: "flat", Path: "s3://gone/flat/x.bin", Format: "tokens", Weight: 1}})
	corpus, err := OpenCorpusWith(cfg, objectResources(t, store))
	if err != nil {
		t.Fatal(err)
	}
	defer corpus.Close()
	rank, err := NewRank(corpus, 0, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	buf := batchBuf(cfg)
	for i := 0; err == nil; i++ {
		var p Produced
		p, err = rank.NextBatch(buf)
		if err == nil && p.Lines == 0 {
			t.Fatalf("the whole file was read with the store gone, from a cache of 16 KiB (%d batches)", i)
		}
	}
	if !errors.Is(err, objstore.ErrObject) || !strings.Contains(err.Error(), "s3://gone/flat/x.bin") {
		t.Fatalf("reading with the store gone: got %v, want an object storage error naming the object", err)
	}
}
