package stream

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/dataloaderd/dataloaderd/internal/state"
	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// checkGroupOrder checks one epoch of a shard's order: a permutation of
// its units in which each run's units come consecutively and in order.
func checkGroupOrder(t *testing.T, s *shard, epoch uint64, runs [][2]uint64) {
	t.Helper()
	at := map[uint64]uint64{}
	for pos := range s.n {
		u := s.unit(epoch, pos)
		if u < s.lo || u >= s.lo+s.n {
			t.Fatalf("epoch %d pos %d: unit %d outside [%d, %d)", epoch, pos, u, s.lo, s.lo+s.n)
		}
		if _, dup := at[u]; dup {
			t.Fatalf("epoch %d: unit %d visited twice", epoch, u)
		}
		at[u] = pos
	}
	for _, r := range runs {
		for u := r[0] + 1; u < r[1]; u++ {
			if at[u] != at[u-1]+1 {
				t.Fatalf("epoch %d: run %v: unit %d at position %d, unit %d at %d: not consecutive in order",
					epoch, r, u-1, at[u-1], u, at[u])
			}
		}
	}
}

// TestGroupOrder: random runs in a shard are each visited consecutively
// and in order, the items (runs and lone units) follow the shard's
// permutation on their count, and concurrent readers of many epochs agree.
func TestGroupOrder(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for trial := 0; trial < 200; trial++ {
		lo := uint64(rng.Intn(50))
		n := uint64(2 + rng.Intn(60))
		var runs [][2]uint64
		for u := lo; u < lo+n; {
			size := uint64(1 + rng.Intn(8))
			if u+size > lo+n {
				size = lo + n - u
			}
			if size >= 2 && rng.Intn(2) == 0 {
				runs = append(runs, [2]uint64{u, u + size})
				u += size
			} else {
				u++
			}
		}
		if len(runs) == 0 {
			continue
		}
		s := &shard{lo: lo, n: n, key: rng.Uint64(), order: newGroupOrder(lo, n, runs)}
		for epoch := uint64(0); epoch < 4; epoch++ {
			checkGroupOrder(t, s, epoch, runs)
			// The item starting each run's visit follows permute(k, items, j).
			var firsts []uint64
			for pos := uint64(0); pos < n; {
				u := s.unit(epoch, pos)
				firsts = append(firsts, u)
				pos++
				for _, r := range runs {
					if u == r[0] {
						pos += r[1] - r[0] - 1
					}
				}
			}
			items := s.order.items
			if uint64(len(firsts)) != items {
				t.Fatalf("%d items visited, want %d", len(firsts), items)
			}
			for j := range items {
				a, _ := s.order.item(permute(s.key^mix(epoch+1), items, j))
				if firsts[j] != lo+a {
					t.Fatalf("epoch %d item %d starts at unit %d, want %d", epoch, j, firsts[j], lo+a)
				}
			}
		}
	}
	// Concurrent readers over epochs: the same answers as one reader.
	runs := [][2]uint64{{3, 9}, {12, 14}, {20, 40}}
	s := &shard{lo: 0, n: 50, key: 7, order: newGroupOrder(0, 50, runs)}
	want := map[[2]uint64]uint64{}
	ref := &shard{lo: 0, n: 50, key: 7, order: newGroupOrder(0, 50, runs)}
	for e := uint64(0); e < 6; e++ {
		for p := range uint64(50) {
			want[[2]uint64{e, p}] = ref.unit(e, p)
		}
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Go(func() {
			for i := 0; i < 3000; i++ {
				e, p := uint64((i/50+g)%6), uint64(i%50)
				if got := s.unit(e, p); got != want[[2]uint64{e, p}] {
					t.Errorf("concurrent unit(%d, %d) = %d, want %d", e, p, got, want[[2]uint64{e, p}])
					return
				}
			}
		})
	}
	wg.Wait()
}

// writeZJSONL writes docs as JSONL compressed with zstd (zst) or gzip.
func writeZJSONL(t testing.TB, path string, docs [][]int32, zst bool) {
	var b strings.Builder
	for i, d := range docs {
		words := make([]string, len(d))
		for j, tok := range d {
			words[j] = strconv.Itoa(int(tok))
		}
		fmt.Fprintf(&b, "{\"id\": %d, \"text\": %q}\n", i, strings.Join(words, " "))
	}
	var out []byte
	if zst {
		enc, err := zstd.NewWriter(nil)
		if err != nil {
			t.Fatal(err)
		}
		out = enc.EncodeAll([]byte(b.String()), nil)
		enc.Close()
	} else {
		var buf bytes.Buffer
		w := gzip.NewWriter(&buf)
		w.Write([]byte(b.String()))
		w.Close()
		out = buf.Bytes()
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// compressedCorpus writes a dataset of zstd and gzip JSONL files next to a
// plain JSONL one and a Megatron one, all of unique token values.
func compressedCorpus(t *testing.T, rng *rand.Rand) ([]Dataset, map[int32]bool) {
	dir := t.TempDir()
	a, next := testcorpus.UniqueDocs(rng, 60+rng.Intn(60), 40, 1)
	z1, next := testcorpus.UniqueDocs(rng, 100+rng.Intn(100), 40, next)
	z2, next := testcorpus.UniqueDocs(rng, 100+rng.Intn(100), 40, next)
	z3, next := testcorpus.UniqueDocs(rng, 30+rng.Intn(30), 40, next)
	c, _ := testcorpus.UniqueDocs(rng, 20+rng.Intn(20), 30, next)
	writeJSONL(t, filepath.Join(dir, "a.jsonl"), a, false, false)
	os.Mkdir(filepath.Join(dir, "z"), 0o755)
	writeZJSONL(t, filepath.Join(dir, "z", "1.jsonl.zst"), z1, true)
	writeZJSONL(t, filepath.Join(dir, "z", "2.jsonl.gz"), z2, false)
	writeZJSONL(t, filepath.Join(dir, "z", "3.jsonl.zst"), z3, true)
	all := map[int32]bool{}
	for _, docs := range [][][]int32{a, z1, z2, z3, c} {
		for _, d := range docs {
			for _, tok := range d {
				all[tok] = true
			}
		}
	}
	return []Dataset{
		{Name: "a", Path: filepath.Join(dir, "a.jsonl"), Format: "jsonl", Weight: 1, Tokenizer: "ints"},
		{Name: "z", Path: filepath.Join(dir, "z"), Format: "jsonl", Weight: 2, Tokenizer: "ints"},
		{Name: "c", Path: testcorpus.Megatron(t, dir, "c", c), Format: "megatron", Weight: 1},
	}, all
}

// TestExactlyOnceCompressed is TestExactlyOnceText for compressed JSONL
// files of many units each: through saves, crashes and rescales every token
// is served exactly once per epoch, every shard visits each file's units
// consecutively in order, and decoding starts over a bounded number of
// times, not once per unit.
func TestExactlyOnceCompressed(t *testing.T) {
	defer func(b uint64) { textBlockBytes = b }(textBlockBytes)
	textBlockBytes = 1000
	for seed := int64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			ds, all := compressedCorpus(t, rng)
			cfg := randomConfig(rng, ds)
			cfg.LogicalShards = uint32(2 + rng.Intn(2))
			cfg.Epochs = uint32(1 + rng.Intn(2))
			corpus := openInts(t, cfg, 2, 32<<10) // a few units: re-reads decode again
			z := corpus.datasets[1]
			grouped := 0
			for _, s := range z.shards {
				runs := z.src.(unitGrouper).Groups(s.lo, s.lo+s.n)
				if (s.order != nil) != (len(runs) > 0) {
					t.Fatalf("shard %d: order %v with %d runs", s.index, s.order != nil, len(runs))
				}
				if s.order != nil {
					grouped++
					for e := uint64(0); e < 3; e++ {
						checkGroupOrder(t, s, e, runs)
					}
				}
			}
			units := z.src.Units()
			if grouped == 0 || units < 40 {
				t.Fatalf("%d units, %d shards with runs: the test needs many", units, grouped)
			}
			for _, s := range corpus.datasets[0].shards {
				if s.order != nil {
					t.Fatalf("plain JSONL shard %d has a group order", s.index)
				}
			}
			served := crashAndRescale(t, rng, cfg, corpus.Fingerprint(), 4, 2, 30,
				func(int, bool) *Corpus { return corpus })
			checkServed(t, served, all, int(cfg.Epochs))
			st := corpus.Compressed()["z"]
			if st.Files != 3 || st.Whole != 0 {
				t.Fatalf("compressed stats %+v, want 3 files with hints", st)
			}
			// Each round's ranks start over the files they are in (at most
			// a file and a split per shard, per epoch, per round), far
			// fewer than one start per unit.
			bound := uint64(4 * (3 + cfg.LogicalShards) * (cfg.Epochs + 1))
			t.Logf("%d units in %d shards, %d epochs: %d decoder starts (bound %d)", units, cfg.LogicalShards, cfg.Epochs, st.Starts, bound)
			if st.Starts > bound {
				t.Errorf("%d decoder starts for %d units, want at most %d", st.Starts, units, bound)
			}
		})
	}
}

// TestPlainShardsKeepTheirOrder: shards without runs of units (every
// format but compressed JSONL, and compressed files of one unit) visit
// their units in exactly the order they did before runs existed.
func TestPlainShardsKeepTheirOrder(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	dir := t.TempDir()
	a, next := testcorpus.UniqueDocs(rng, 200, 40, 1)
	b, next := testcorpus.UniqueDocs(rng, 30, 20, next)
	c, _ := testcorpus.UniqueDocs(rng, 50, 30, next)
	writeJSONL(t, filepath.Join(dir, "a.jsonl"), a, false, false)
	os.Mkdir(filepath.Join(dir, "b"), 0o755)
	for i := range b {
		writeJSONL(t, filepath.Join(dir, "b", fmt.Sprintf("%02d.jsonl.gz", i)), b[i:i+1], true, false)
	}
	cfg := Config{SeqLen: 15, BatchSize: 2, LogicalShards: 3, EOS: testEOS, BOS: -1, Pad: testPad, Seed: 99, Epochs: 1,
		Datasets: []Dataset{
			{Name: "a", Path: filepath.Join(dir, "a.jsonl"), Format: "jsonl", Weight: 1, Tokenizer: "ints"},
			{Name: "b", Path: filepath.Join(dir, "b"), Format: "jsonl", Weight: 1, Tokenizer: "ints"},
			{Name: "c", Path: testcorpus.Megatron(t, dir, "c", c), Format: "megatron", Weight: 1},
		}}
	corpus := openInts(t, cfg, 1, 1<<20)
	for _, d := range corpus.datasets {
		for _, s := range d.shards {
			if s.order != nil {
				t.Fatalf("dataset %s shard %d: a group order without runs", d.name, s.index)
			}
			for e := uint64(0); e < 3; e++ {
				for pos := range s.n {
					if got, want := s.unit(e, pos), s.lo+permute(s.key^mix(e+1), s.n, pos); got != want {
						t.Fatalf("dataset %s shard %d epoch %d pos %d: unit %d, want %d", d.name, s.index, e, pos, got, want)
					}
				}
			}
		}
	}
}

// TestResumeAcrossSubUnitsRefused: a state saved when each compressed file
// was one unit (before files were split by their size hint) is refused
// with the fingerprint error naming the units, not served from.
func TestResumeAcrossSubUnitsRefused(t *testing.T) {
	defer func(b uint64) { textBlockBytes = b }(textBlockBytes)
	textBlockBytes = 1000
	rng := rand.New(rand.NewSource(2))
	ds, _ := compressedCorpus(t, rng)
	cfg := randomConfig(rng, ds)
	cfg.LogicalShards = 2
	corpus := openInts(t, cfg, 1, 1<<20)
	rank, err := NewRank(corpus, 0, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rank.NextBatch(batchBuf(cfg)); err != nil {
		t.Fatal(err)
	}
	old := corpus.Fingerprint()
	old.Datasets = append([]state.DatasetPrint(nil), old.Datasets...)
	if old.Datasets[1].Units <= 3 {
		t.Fatalf("dataset z has %d units, want more than its 3 files", old.Datasets[1].Units)
	}
	now := old.Datasets[1].Units
	// Before: the plain file's blocks, and one unit per compressed file.
	old.Datasets[1].Units = 3
	blob, err := state.Encode(old, rank.State())
	if err != nil {
		t.Fatal(err)
	}
	_, err = state.Merge(corpus.Fingerprint(), []string{"rank-0-of-1.json"}, [][]byte{blob})
	if err == nil {
		t.Fatal("a state saved with one unit per compressed file was accepted")
	}
	for _, want := range []string{`dataset "z"`, "3 units", fmt.Sprintf("%d units", now)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestCompressedMostShards: Compressed says across how many shards the most
// shared compressed file is cut, which the daemon warns of when large.
func TestCompressedMostShards(t *testing.T) {
	defer func(b uint64) { textBlockBytes = b }(textBlockBytes)
	textBlockBytes = 1000
	rng := rand.New(rand.NewSource(3))
	dir := t.TempDir()
	docs, _ := testcorpus.UniqueDocs(rng, 400, 40, 1)
	writeZJSONL(t, filepath.Join(dir, "one.jsonl.gz"), docs, false)
	for _, shards := range []uint32{1, 4, 16} {
		cfg := Config{SeqLen: 15, BatchSize: 2, LogicalShards: shards, EOS: 0, BOS: -1,
			Datasets: []Dataset{{Name: "one", Path: dir, Format: "jsonl", Weight: 1, Tokenizer: "ints"}}}
		st := openInts(t, cfg, 1, 1<<20).Compressed()["one"]
		if st.Files != 1 || st.Whole != 0 || st.MostShards != int(shards) {
			t.Errorf("%d shards over one gzip file: %+v, want MostShards %d", shards, st, shards)
		}
	}
}
