package stream

import (
	"context"
	"fmt"
	"math/rand"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/state"
	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// Token values the test corpora never use for data.
const (
	testEOS = 0
	testBOS = 65535
	testPad = 65534
)

// testCorpus writes a randomized corpus whose every data token value is
// unique: two Megatron datasets and one flat token file.
func testCorpus(t testing.TB, rng *rand.Rand) ([]Dataset, map[int32]bool) {
	dir := t.TempDir()
	a, next := testcorpus.UniqueDocs(rng, 20+rng.Intn(60), 40, 1)
	b, next := testcorpus.UniqueDocs(rng, 10+rng.Intn(40), 25, next)
	c, next := testcorpus.UniqueDocs(rng, 30+rng.Intn(40), 30, next)
	if next >= testPad {
		t.Fatalf("corpus too large for uint16 token values: %d", next)
	}
	testcorpus.Tokens(t, filepath.Join(dir, "c.bin"), c, testEOS)
	all := map[int32]bool{}
	for _, docs := range [][][]int32{a, b, c} {
		for _, d := range docs {
			for _, tok := range d {
				all[tok] = true
			}
		}
	}
	return []Dataset{
		{Name: "a", Path: testcorpus.Megatron(t, dir, "a", a), Format: "megatron", Weight: 1 + rng.Float64()*3},
		{Name: "b", Path: testcorpus.Megatron(t, dir, "b", b), Format: "megatron", Weight: 1 + rng.Float64()*3},
		{Name: "c", Path: filepath.Join(dir, "c.bin"), Format: "tokens", Weight: 1 + rng.Float64()*3},
	}, all
}

func randomConfig(rng *rand.Rand, ds []Dataset) Config {
	cfg := Config{
		SeqLen: uint32(3 + rng.Intn(40)), BatchSize: uint32(1 + rng.Intn(4)), Seed: rng.Uint64(),
		LogicalShards: uint32(4 + rng.Intn(6)), EOS: testEOS, BOS: -1, Pad: testPad, Epochs: 1,
		ShuffleWindow: uint32(1 + rng.Intn(8)), Datasets: ds,
	}
	if rng.Intn(2) == 0 {
		cfg.BOS = testBOS
	}
	return cfg
}

// count adds a batch's data tokens to served.
func count(served map[int32]int, toks []int32) {
	for _, tok := range toks {
		if tok != testEOS && tok != testBOS && tok != testPad {
			served[tok]++
		}
	}
}

// saveWorld encodes every rank's state to its file form and merges them
// back, as a resume from a checkpoint folder does.
func saveWorld(t *testing.T, fp state.Fingerprint, states []state.Rank) *state.Restored {
	t.Helper()
	var names []string
	var blobs [][]byte
	for _, st := range states {
		b, err := state.Encode(fp, st)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, fmt.Sprintf("rank %d", st.DPRank))
		blobs = append(blobs, b)
	}
	r, err := state.Merge(fp, names, blobs)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func batchBuf(cfg Config) []int32 { return make([]int32, int(cfg.BatchSize)*cfg.LineTokens()) }

// TestExactlyOnce runs randomized sequences of consume / save / crash (the
// batches after the save are lost) / resume on another world size, and
// checks that every corpus token was served exactly once per epoch.
func TestExactlyOnce(t *testing.T) {
	for seed := int64(1); seed <= 60; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			ds, all := testCorpus(t, rng)
			cfg := randomConfig(rng, ds)
			cfg.Epochs = uint32(1 + rng.Intn(2))
			corpus, err := OpenCorpus(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer corpus.Close()
			served := crashAndRescale(t, rng, cfg, corpus.Fingerprint(), 5, int(min(cfg.LogicalShards, 5)), 25,
				func(round int, final bool) *Corpus {
					// Every other resume changes the weights (the last round
					// keeps them positive so that it can run to the end).
					if round == 0 || rng.Intn(2) != 0 {
						return corpus
					}
					rcfg := cfg
					rcfg.Datasets = append([]Dataset(nil), cfg.Datasets...)
					for i := range rcfg.Datasets {
						rcfg.Datasets[i].Weight = float64(rng.Intn(4))
						if final || rcfg.Datasets[i].Weight == 0 && i == 0 {
							rcfg.Datasets[i].Weight++
						}
					}
					rc, err := OpenCorpus(rcfg)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { rc.Close() })
					return rc
				})
			checkServed(t, served, all, int(cfg.Epochs))
		})
	}
}

// crashAndRescale runs rounds of a world of 1 to maxW ranks over the corpus
// corpusFor gives each round: every rank takes up to maxSteps batches (the
// last round: to the end), saves, and takes a few more that die with it;
// the next round resumes from the saves. It returns what was served up to
// each save, by token value.
func crashAndRescale(t *testing.T, rng *rand.Rand, cfg Config, fp state.Fingerprint, rounds, maxW, maxSteps int,
	corpusFor func(round int, final bool) *Corpus) map[int32]int {
	t.Helper()
	return crashAndRescaleWorlds(t, rng, cfg, fp, rounds, func(int) int { return 1 + rng.Intn(maxW) }, maxSteps, corpusFor)
}

// crashAndRescaleWorlds is crashAndRescale with the world size of each
// round chosen by world.
func crashAndRescaleWorlds(t *testing.T, rng *rand.Rand, cfg Config, fp state.Fingerprint, rounds int, world func(round int) int,
	maxSteps int, corpusFor func(round int, final bool) *Corpus) map[int32]int {
	t.Helper()
	served := map[int32]int{}
	var from *state.Restored
	buf := batchBuf(cfg)
	line := cfg.LineTokens()
	for round := 0; round < rounds; round++ {
		w := uint32(world(round))
		final := round == rounds-1
		corpus := corpusFor(round, final)
		var states []state.Rank
		for r := uint32(0); r < w; r++ {
			rank, err := NewRank(corpus, r, w, from)
			if err != nil {
				t.Fatal(err)
			}
			steps := rng.Intn(maxSteps)
			for i := 0; final || i < steps; i++ {
				p, err := rank.NextBatch(buf)
				if err != nil {
					t.Fatal(err)
				}
				if p.Lines == 0 {
					break
				}
				count(served, buf[:p.Lines*line])
			}
			states = append(states, rank.State())
			// Batches produced after the save die with the process.
			for i := rng.Intn(3); i > 0; i-- {
				if _, err := rank.NextBatch(buf); err != nil {
					t.Fatal(err)
				}
			}
		}
		if !final {
			from = saveWorld(t, fp, states)
		}
	}
	return served
}

// checkServed fails unless every corpus token was served want times and
// nothing else was served.
func checkServed(t *testing.T, served map[int32]int, all map[int32]bool, want int) {
	t.Helper()
	for tok := range all {
		if served[tok] != want {
			t.Fatalf("token %d served %d times, want %d", tok, served[tok], want)
		}
	}
	for tok := range served {
		if !all[tok] {
			t.Fatalf("token %d served but not in the corpus", tok)
		}
	}
}

// run returns the next n batches of a rank (fewer at the end).
func run(t *testing.T, rank *Rank, cfg Config, n int) [][]int32 {
	t.Helper()
	return runLines(t, rank, cfg, n, nil)
}

// TestDeterminism: the same config and world size give bit-identical
// batches, and a run resumed after step s serves the uninterrupted run's
// batches s+1, s+2, ...
func TestDeterminism(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			ds, _ := testCorpus(t, rng)
			cfg := randomConfig(rng, ds)
			cfg.Epochs = 0
			corpus, err := OpenCorpus(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer corpus.Close()
			w := uint32(1 + rng.Intn(3))
			for r := uint32(0); r < w; r++ {
				a, _ := NewRank(corpus, r, w, nil)
				b, _ := NewRank(corpus, r, w, nil)
				want := run(t, a, cfg, 60)
				if got := run(t, b, cfg, 60); !reflect.DeepEqual(got, want) {
					t.Fatalf("rank %d: two runs of one config differ", r)
				}
			}
			// Resume every rank after step s.
			s := 1 + rng.Intn(30)
			var states []state.Rank
			var rest [][][]int32
			for r := uint32(0); r < w; r++ {
				rank, _ := NewRank(corpus, r, w, nil)
				run(t, rank, cfg, s)
				states = append(states, rank.State())
				rest = append(rest, run(t, rank, cfg, 40))
			}
			from := saveWorld(t, corpus.Fingerprint(), states)
			for r := uint32(0); r < w; r++ {
				rank, err := NewRank(corpus, r, w, from)
				if err != nil {
					t.Fatal(err)
				}
				if got := run(t, rank, cfg, 40); !reflect.DeepEqual(got, rest[r]) {
					t.Fatalf("rank %d resumed after step %d differs from the uninterrupted run", r, s)
				}
			}
		})
	}
}

// TestSkipBatch: a rank that skips k batches (cursors moved, nothing
// copied) then serves what a rank that produced them serves, and holds the
// same state; so does one resumed from it.
func TestSkipBatch(t *testing.T) {
	for seed := int64(1); seed <= 10; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			ds, _ := testCorpus(t, rng)
			cfg := randomConfig(rng, ds)
			cfg.Epochs = 0
			corpus, err := OpenCorpus(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer corpus.Close()
			k := 1 + rng.Intn(40)
			a, _ := NewRank(corpus, 0, 2, nil)
			run(t, a, cfg, k)
			b, _ := NewRank(corpus, 0, 2, nil)
			for i := 0; i < k; i++ {
				if p, err := b.SkipBatch(context.Background()); err != nil || p.Lines != int(cfg.BatchSize) {
					t.Fatalf("skip %d: %d lines, %v", i, p.Lines, err)
				}
			}
			if !reflect.DeepEqual(a.State(), b.State()) {
				t.Fatalf("state after %d skipped batches differs from %d produced", k, k)
			}
			if got, want := run(t, b, cfg, 10), run(t, a, cfg, 10); !reflect.DeepEqual(got, want) {
				t.Fatalf("batches after %d skipped differ", k)
			}
		})
	}
}
