package stream

import (
	"compress/gzip"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// writeJSONL writes docs as JSONL lines {"text": "..."}, gzip-compressed
// when gz, with one bad line in between when bad (skipped by on_bad_record).
func writeJSONL(t testing.TB, path string, docs [][]int32, gz, bad bool) {
	var b strings.Builder
	for i, d := range docs {
		words := make([]string, len(d))
		for j, tok := range d {
			words[j] = strconv.Itoa(int(tok))
		}
		fmt.Fprintf(&b, "{\"id\": %d, \"text\": %q}\n", i, strings.Join(words, " "))
		if bad && i == len(docs)/2 {
			b.WriteString("{\"id\": \"no text field\"}\n")
		}
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if gz {
		w := gzip.NewWriter(f)
		w.Write([]byte(b.String()))
		w.Close()
		return
	}
	f.WriteString(b.String())
}

// TestExactlyOnceText is TestExactlyOnce for text datasets tokenized on the
// fly (plain JSONL split in blocks, gzip JSONL read whole, a skipped bad
// record) next to a Megatron and an Arrow one: through saves, crashes and rescales every
// token is served exactly once per epoch, and a rank resumed from a state
// continues exactly as the uninterrupted one.
func TestExactlyOnceText(t *testing.T) {
	for seed := int64(1); seed <= 12; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			dir := t.TempDir()
			a, next := testcorpus.UniqueDocs(rng, 60+rng.Intn(60), 40, 1)
			b, next := testcorpus.UniqueDocs(rng, 40+rng.Intn(40), 30, next)
			c, next := testcorpus.UniqueDocs(rng, 20+rng.Intn(20), 30, next)
			e, _ := testcorpus.UniqueDocs(rng, 30+rng.Intn(30), 30, next)
			writeJSONL(t, filepath.Join(dir, "a.jsonl"), a, false, true)
			os.Mkdir(filepath.Join(dir, "b"), 0o755)
			writeJSONL(t, filepath.Join(dir, "b", "1.jsonl.gz"), b[:len(b)/2], true, false)
			writeJSONL(t, filepath.Join(dir, "b", "2.jsonl.gz"), b[len(b)/2:], true, false)
			all := map[int32]bool{}
			for _, docs := range [][][]int32{a, b, c, e} {
				for _, d := range docs {
					for _, tok := range d {
						all[tok] = true
					}
				}
			}
			ds := []Dataset{
				{Name: "a", Path: filepath.Join(dir, "a.jsonl"), Format: "jsonl", Weight: 2, Tokenizer: "ints", OnBadRecord: "skip"},
				{Name: "b", Path: filepath.Join(dir, "b"), Format: "jsonl", Weight: 1, Tokenizer: "ints"},
				{Name: "c", Path: testcorpus.Megatron(t, dir, "c", c), Format: "megatron", Weight: 1},
				{Name: "e", Path: testcorpus.Arrow(t, dir, "e", e, 7), Format: "arrow", Weight: 1},
			}
			cfg := randomConfig(rng, ds)
			cfg.LogicalShards = 2
			cfg.Epochs = uint32(1 + rng.Intn(2))
			corpus := openInts(t, cfg, 2, 1<<20)
			if got := corpus.Fingerprint().Datasets[0].Tokenizer; got != "test:ints" {
				t.Fatalf("fingerprint tokenizer %q", got)
			}
			served := crashAndRescale(t, rng, cfg, corpus.Fingerprint(), 4, 2, 20,
				func(int, bool) *Corpus { return corpus })
			checkServed(t, served, all, int(cfg.Epochs))
			if sk := corpus.Skipped(); sk["a"] != 1 || len(sk) != 1 {
				t.Fatalf("skipped records: %v, want a:1", sk)
			}
		})
	}
}

// TestTextErrors: a text dataset without its tokenizer file, and a bad
// record when skipping is not asked for, fail with errors that name them.
func TestTextErrors(t *testing.T) {
	dir := t.TempDir()
	docs, _ := testcorpus.UniqueDocs(rand.New(rand.NewSource(1)), 20, 10, 1)
	writeJSONL(t, filepath.Join(dir, "a.jsonl"), docs, false, true)
	cfg := Config{SeqLen: 7, BatchSize: 1, LogicalShards: 1, EOS: 0, BOS: -1, Epochs: 1,
		Datasets: []Dataset{{Name: "a", Path: filepath.Join(dir, "a.jsonl"), Format: "jsonl", Weight: 1, Tokenizer: "cl100k_base"}}}
	res := NewResources(1, 1<<20, []string{dir})
	defer res.Close()
	t.Setenv("DATALOADERD_TOKENIZERS", "")
	if _, err := OpenCorpusWith(cfg, res); err == nil || !strings.Contains(err.Error(), `dataset "a": tokenizer "cl100k_base"`) ||
		!strings.Contains(err.Error(), dir) {
		t.Fatalf("missing rank file: %v", err)
	}
	res.addTokenizer("ints", testcorpus.Ints{})
	cfg.Datasets[0].Tokenizer = "ints"
	corpus, err := OpenCorpusWith(cfg, res)
	if err != nil {
		t.Fatal(err)
	}
	defer corpus.Close()
	rank, _ := NewRank(corpus, 0, 1, nil)
	buf := batchBuf(cfg)
	for {
		p, err := rank.NextBatch(buf)
		if err != nil {
			if !strings.Contains(err.Error(), "a.jsonl") || !strings.Contains(err.Error(), `field "text"`) {
				t.Fatalf("bad record error does not name the file and field: %v", err)
			}
			return
		}
		if p.Lines == 0 {
			t.Fatal("a bad record was served past without on_bad_record: skip")
		}
	}
}

// TestTextShardOfSkippedRecords: a logical shard whose records were all
// skipped serves nothing, in a bounded run (which ends, every other token
// served once) and in an unbounded one (which goes on serving the others).
func TestTextShardOfSkippedRecords(t *testing.T) {
	dir := t.TempDir()
	docs, _ := testcorpus.UniqueDocs(rand.New(rand.NewSource(4)), 40, 20, 1)
	writeJSONL(t, filepath.Join(dir, "a.jsonl"), docs, false, false)
	good, _ := os.ReadFile(filepath.Join(dir, "a.jsonl"))
	bad := strings.Repeat("{\"id\": \"no text\"}\n", len(good)/10)
	if err := os.WriteFile(filepath.Join(dir, "b.jsonl"), []byte(bad[:len(good)]), 0o644); err != nil {
		t.Fatal(err)
	}
	all := map[int32]bool{}
	for _, d := range docs {
		for _, tok := range d {
			all[tok] = true
		}
	}
	for _, epochs := range []uint32{1, 0} {
		cfg := Config{SeqLen: 9, BatchSize: 2, LogicalShards: 2, EOS: 0, BOS: -1, Pad: testPad, Epochs: epochs, ShuffleWindow: 1,
			Datasets: []Dataset{{Name: "a", Path: dir, Format: "jsonl", Weight: 1, Tokenizer: "ints", OnBadRecord: "skip"}}}
		res := NewResources(1, 1<<20, nil)
		res.addTokenizer("ints", testcorpus.Ints{})
		corpus, err := OpenCorpusWith(cfg, res)
		if err != nil {
			t.Fatal(err)
		}
		rank, _ := NewRank(corpus, 0, 1, nil)
		served := map[int32]int{}
		buf := batchBuf(cfg)
		for i := 0; i < 500; i++ {
			p, err := rank.NextBatch(buf)
			if err != nil {
				t.Fatalf("epochs %d: %v", epochs, err)
			}
			if p.Lines == 0 {
				break
			}
			count(served, buf[:p.Lines*cfg.LineTokens()])
		}
		if epochs == 1 {
			checkServed(t, served, all, 1)
		} else if len(served) != len(all) {
			t.Fatalf("unbounded run served %d distinct tokens, the good shard has %d", len(served), len(all))
		}
		corpus.Close()
		res.Close()
	}
}

// openInts opens cfg with the test tokenizer "ints" on resources of the
// given workers and token cache; both are closed when the test ends.
func openInts(t *testing.T, cfg Config, workers int, cacheBytes int64) *Corpus {
	t.Helper()
	res := NewResources(workers, cacheBytes, nil)
	t.Cleanup(func() { res.Close() })
	res.addTokenizer("ints", testcorpus.Ints{})
	corpus, err := OpenCorpusWith(cfg, res)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { corpus.Close() })
	return corpus
}
