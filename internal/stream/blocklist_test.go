package stream

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/state"
	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// docRef names a document of a blocklist test corpus.
type docRef struct {
	dataset string
	index   int
}

// blockCorpus is a corpus of unique tokens for the blocklist's tests: a
// Megatron, an Arrow and a plain JSONL dataset (cut in blocks of several
// documents), each token's document known, and a blocklist of about a
// fifth of its documents (half given inline, half in a file; the text
// ones by hash).
type blockCorpus struct {
	ds      []Dataset
	all     map[int32]bool
	docOf   map[int32]docRef
	blocked map[docRef]bool
	// byHash are the blocked documents named by sha256 (whose service
	// before the blocklist cannot be checked).
	byHash map[docRef]bool
	list   Blocklist
}

func newBlockCorpus(t *testing.T, rng *rand.Rand) blockCorpus {
	old := textBlockBytes
	textBlockBytes = 300
	t.Cleanup(func() { textBlockBytes = old })
	dir := t.TempDir()
	a, next := testcorpus.UniqueDocs(rng, 40+rng.Intn(40), 30, 1)
	e, next := testcorpus.UniqueDocs(rng, 30+rng.Intn(30), 30, next)
	x, next := testcorpus.UniqueDocs(rng, 60+rng.Intn(40), 30, next)
	q, _ := testcorpus.UniqueDocs(rng, 30+rng.Intn(20), 30, next)
	testcorpus.JSONL(t, filepath.Join(dir, "x.jsonl"), x, testcorpus.Plain)
	testcorpus.Parquet(t, filepath.Join(dir, "q.parquet"), q, 5)
	bc := blockCorpus{
		ds: []Dataset{
			{Name: "a", Path: testcorpus.Megatron(t, dir, "a", a), Format: "megatron", Weight: 2},
			{Name: "e", Path: testcorpus.Arrow(t, dir, "e", e, 7), Format: "arrow", Weight: 1},
			{Name: "x", Path: filepath.Join(dir, "x.jsonl"), Format: "jsonl", Weight: 2, Tokenizer: "ints"},
			{Name: "q", Path: filepath.Join(dir, "q.parquet"), Format: "parquet", Weight: 1, Tokenizer: "ints"},
		},
		all: map[int32]bool{}, docOf: map[int32]docRef{}, blocked: map[docRef]bool{}, byHash: map[docRef]bool{},
	}
	var inFile []string
	for di, docs := range [][][]int32{a, e, x, q} {
		name := bc.ds[di].Name
		for i, d := range docs {
			for _, tok := range d {
				bc.all[tok], bc.docOf[tok] = true, docRef{name, i}
			}
			if rng.Intn(5) != 0 {
				continue
			}
			bc.blocked[docRef{name, i}] = true
			entry := BlockedDocument{Dataset: name}
			n := uint64(i)
			switch {
			case name == "x" && rng.Intn(2) == 0:
				sum := sha256.Sum256([]byte(testcorpus.Text(d)))
				entry.SHA256 = hex.EncodeToString(sum[:])
				bc.byHash[docRef{name, i}] = true
			case name == "x":
				line := n + 1
				entry.File, entry.Line = "x.jsonl", &line
			case name == "q":
				entry.File, entry.Row = filepath.Join(dir, "q.parquet"), &n
			default:
				entry.Document = &n
			}
			if rng.Intn(2) == 0 {
				bc.list.Documents = append(bc.list.Documents, entry)
				continue
			}
			b, _ := json.Marshal(entry)
			inFile = append(inFile, string(b))
		}
	}
	path := filepath.Join(dir, "blocked.jsonl")
	body := "# blocked documents\n"
	for _, l := range inFile {
		body += l + "\n\n"
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	bc.list.Files = []string{path}
	return bc
}

// tokenBlocked reports whether a token is data of a blocked document.
func (bc blockCorpus) tokenBlocked(tok int32) bool {
	ref, ok := bc.docOf[tok]
	return ok && bc.blocked[ref]
}

// sameGeometry fails unless a batch made under the blocklist is the batch
// made without it, a blocked document's data tokens (and its framing)
// written as padding.
func (bc blockCorpus) sameGeometry(t *testing.T, plain, blocked []int32) {
	t.Helper()
	for k := range plain {
		p, b := plain[k], blocked[k]
		switch {
		case bc.tokenBlocked(p) && b != testPad:
			t.Fatalf("column %d: blocked token %d served", k, p)
		case p != b && (b != testPad || (bc.all[p] && !bc.tokenBlocked(p))):
			t.Fatalf("column %d: %d where the run without a blocklist has %d", k, b, p)
		}
	}
}

// TestBlocklistAtResume: a world of 2 serves part of an epoch with no
// blocklist and saves; a world of 3 resumes from it with a blocklist (by
// index, by hash, inline and in a file), saves in turn, and a world of 1
// to 3 resumes with the same blocklist to the epoch's end. After the
// blocklist arrives no token of a blocked document is served, every other
// token is served exactly once in all, the batches are those of the run
// without the blocklist with the blocked tokens padded, each blocked
// document served before is reported by the rank owning it, and the state
// logs the blocklist once, at the step it took effect.
func TestBlocklistAtResume(t *testing.T) {
	for seed := int64(1); seed <= 16; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			bc := newBlockCorpus(t, rng)
			cfg := randomConfig(rng, bc.ds)
			cfg.LogicalShards = uint32(3 + rng.Intn(3))
			plain := openInts(t, cfg, 2, 1<<20)
			bcfg := cfg
			bcfg.Blocklist = bc.list
			withList := openInts(t, bcfg, 2, 1<<20)
			if !reflect.DeepEqual(plain.Fingerprint(), withList.Fingerprint()) || plain.JobFingerprint() != withList.JobFingerprint() {
				t.Fatal("the blocklist changed the job's fingerprint")
			}
			before, after := map[int32]int{}, map[int32]int{}
			from := blockRound(t, rng, cfg, plain, nil, nil, 2, 10, before, bc)
			arrived := from.Step
			reported := map[docRef]bool{}
			from = blockRound(t, rng, cfg, withList, plain, from, 3, 10, after, bc, func(rank *Rank) {
				for _, s := range rank.BlockReport().Served {
					ref := reportedRef(t, s)
					if !bc.blocked[ref] || reported[ref] || s.Step != from.Step {
						t.Fatalf("report %+v: blocked %v, reported before %v, resumed step %d", s, bc.blocked[ref], reported[ref], from.Step)
					}
					reported[ref] = true
				}
				if n := rank.BlockReport().Unchecked["x"]; n != len(bc.byHash) {
					t.Fatalf("%d sha256 entries reported as unchecked (%v), want %d", n, rank.BlockReport().Unchecked, len(bc.byHash))
				}
			})
			if got := from.Blocklists; len(got) != 1 || got[0].Entries != len(bc.blocked) || got[0].Step != arrived {
				t.Fatalf("state's blocklists %+v, want one of %d entries", got, len(bc.blocked))
			}
			final := blockRound(t, rng, cfg, withList, nil, from, 1+rng.Intn(3), -1, after, bc)
			if !reflect.DeepEqual(final.Blocklists, from.Blocklists) {
				t.Fatalf("the same blocklist at a second resume logged %+v, then %+v", from.Blocklists, final.Blocklists)
			}
			for tok := range bc.all {
				switch {
				case bc.tokenBlocked(tok) && after[tok] > 0:
					t.Fatalf("blocked token %d (%+v) served after the blocklist arrived", tok, bc.docOf[tok])
				case bc.tokenBlocked(tok) && before[tok] > 0 && !reported[bc.docOf[tok]] && !bc.byHash[bc.docOf[tok]]:
					t.Fatalf("blocked document %+v served before the blocklist and not reported", bc.docOf[tok])
				case !bc.tokenBlocked(tok) && before[tok]+after[tok] != 1:
					t.Fatalf("token %d served %d+%d times, want once", tok, before[tok], after[tok])
				}
			}
		})
	}
}

// blockRound runs a world of w ranks from `from` over corpus: each takes
// up to maxSteps batches (-1: to the end), counted into served, then saves
// and makes a batch more that dies with it; with plain, each batch is held
// to the batch a rank of that corpus makes. check sees each rank at its
// start. It returns the saved world.
func blockRound(t *testing.T, rng *rand.Rand, cfg Config, corpus, plain *Corpus, from *state.Restored, w, maxSteps int,
	served map[int32]int, bc blockCorpus, check ...func(*Rank)) *state.Restored {
	t.Helper()
	var states []state.Rank
	buf, pbuf := batchBuf(cfg), batchBuf(cfg)
	for r := uint32(0); r < uint32(w); r++ {
		rank, err := NewRank(corpus, r, uint32(w), from)
		if err != nil {
			t.Fatal(err)
		}
		var twin *Rank
		if plain != nil {
			if twin, err = NewRank(plain, r, uint32(w), from); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range check {
			c(rank)
		}
		steps := maxSteps
		if steps > 0 {
			steps = rng.Intn(maxSteps)
		}
		for i := 0; steps < 0 || i < steps; i++ {
			p, err := rank.NextBatch(buf)
			if err != nil {
				t.Fatal(err)
			}
			if p.Lines == 0 {
				break
			}
			count(served, buf[:p.Lines*cfg.LineTokens()])
			if twin != nil {
				if _, err := twin.NextBatch(pbuf); err != nil {
					t.Fatal(err)
				}
				bc.sameGeometry(t, pbuf, buf)
			}
		}
		states = append(states, rank.State())
		if _, err := rank.NextBatch(buf); err != nil {
			t.Fatal(err)
		}
	}
	return saveWorld(t, corpus.Fingerprint(), states)
}

// TestBlocklistFromStart: a blocklist in the config from the run's start,
// through saves, crashes and resumes on other world sizes over two
// epochs: no token of a blocked document is ever served, every other one
// exactly once an epoch, and no rank reports anything served.
func TestBlocklistFromStart(t *testing.T) {
	for seed := int64(1); seed <= 10; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			bc := newBlockCorpus(t, rng)
			cfg := randomConfig(rng, bc.ds)
			cfg.Epochs = 2
			cfg.LogicalShards = uint32(3 + rng.Intn(3))
			cfg.Blocklist = bc.list
			corpus := openInts(t, cfg, 2, 1<<20)
			served := crashAndRescale(t, rng, cfg, corpus.Fingerprint(), 4, int(min(cfg.LogicalShards, 4)), 25,
				func(int, bool) *Corpus { return corpus })
			for tok := range bc.all {
				want := 2
				if bc.tokenBlocked(tok) {
					want = 0
				}
				if served[tok] != want {
					t.Fatalf("token %d (%+v, blocked %v) served %d times, want %d", tok, bc.docOf[tok], bc.tokenBlocked(tok), served[tok], want)
				}
			}
			rank, err := NewRank(corpus, 0, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			if log := rank.State().Blocklists; len(log) != 1 || log[0].Step != 0 || len(rank.BlockReport().Served) != 0 {
				t.Fatalf("from the start: log %+v, report %+v", log, rank.BlockReport())
			}
		})
	}
}

// TestBlocklistReportsEarlierEpochs: a blocklist that arrives after the
// first epoch reports every blocked document it can place as served.
func TestBlocklistReportsEarlierEpochs(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	bc := newBlockCorpus(t, rng)
	cfg := randomConfig(rng, bc.ds)
	cfg.Epochs, cfg.LogicalShards = 2, 3
	plain := openInts(t, cfg, 2, 1<<20)
	bcfg := cfg
	bcfg.Blocklist = bc.list
	withList := openInts(t, bcfg, 2, 1<<20)
	rank, _ := NewRank(plain, 0, 1, nil)
	served, buf := map[int32]int{}, batchBuf(cfg)
	for len(served) < len(bc.all) {
		if p, err := rank.NextBatch(buf); err != nil || p.Lines == 0 {
			t.Fatalf("the first epoch did not end: %v", err)
		}
		count(served, buf)
	}
	from := saveWorld(t, plain.Fingerprint(), []state.Rank{rank.State()})
	resumed, err := NewRank(withList, 0, 1, from)
	if err != nil {
		t.Fatal(err)
	}
	got := map[docRef]bool{}
	for _, s := range resumed.BlockReport().Served {
		got[reportedRef(t, s)] = true
	}
	for ref := range bc.blocked {
		if !bc.byHash[ref] && !got[ref] {
			t.Errorf("blocked %+v, served in the first epoch, not reported", ref)
		}
	}
}

// reportedRef is the document a report names: a Megatron or Arrow one by
// its index, a text one by its line (from 1) or row.
func reportedRef(t *testing.T, s BlockedServed) docRef {
	t.Helper()
	if s.Record == "" {
		return docRef{s.Dataset, int(s.Document)}
	}
	var n int
	if _, err := fmt.Sscanf(s.Record, "line %d of", &n); err == nil {
		return docRef{s.Dataset, n - 1}
	}
	if _, err := fmt.Sscanf(s.Record, "row %d of", &n); err != nil {
		t.Fatalf("report %+v: record %q", s, s.Record)
	}
	return docRef{s.Dataset, n}
}
