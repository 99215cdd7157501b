package stream

import (
	"fmt"
	"math/rand"
	"reflect"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/state"
)

// TestMixing: after every line, each dataset's served lines on a rank are
// within one line of its share of the weights.
func TestMixing(t *testing.T) {
	for seed := int64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewSource(seed))
		ds, _ := testCorpus(t, rng)
		cfg := randomConfig(rng, ds)
		cfg.Epochs, cfg.BatchSize = 0, 1
		if seed%3 == 0 {
			ds[1].Weight = 0 // a zero-weight dataset is never served
		}
		corpus, err := OpenCorpus(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var sum float64
		for _, d := range ds {
			sum += d.Weight
		}
		rank, err := NewRank(corpus, 0, 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		lines := make([]int, len(ds))
		buf := batchBuf(cfg)
		for total := 1; total <= 2000; total++ {
			p, err := rank.NextBatch(buf)
			if err != nil {
				t.Fatal(err)
			}
			for d, n := range p.DatasetLines {
				lines[d] += n
			}
			for d := range ds {
				ideal := float64(total) * ds[d].Weight / sum
				if diff := float64(lines[d]) - ideal; diff > 1 || diff < -1 {
					t.Fatalf("seed %d after %d lines: dataset %q has %d lines, weights say %.2f", seed, total, ds[d].Name, lines[d], ideal)
				}
			}
		}
		corpus.Close()
	}
}

// TestMixingAfterWeightChange: a resume with other weights is a change of
// weights at the resumed step. The lines after it follow the new weights
// within one line per rank, from the first line on (the past is not repaid),
// on the same or another world size; the change is logged in the state, and
// weights that give the same mixture (6:2 for 3:1) are no change.
func TestMixingAfterWeightChange(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewSource(seed))
		ds, _ := testCorpus(t, rng)
		cfg := randomConfig(rng, ds)
		cfg.Epochs, cfg.BatchSize = 0, 1
		for i := range cfg.Datasets {
			cfg.Datasets[i].Weight = []float64{6, 1, 1}[i]
		}
		before, err := OpenCorpus(cfg)
		if err != nil {
			t.Fatal(err)
		}
		w := uint32(1 + rng.Intn(3))
		var states []state.Rank
		steps := 50 + rng.Intn(100)
		for r := uint32(0); r < w; r++ {
			rank, _ := NewRank(before, r, w, nil)
			run(t, rank, cfg, steps)
			states = append(states, rank.State())
		}
		from := saveWorld(t, before.Fingerprint(), states)
		before.Close()

		after := cfg
		after.Datasets = append([]Dataset(nil), cfg.Datasets...)
		want := []float64{1, 1, 2}
		for i := range after.Datasets {
			after.Datasets[i].Weight = want[i]
		}
		corpus, err := OpenCorpus(after)
		if err != nil {
			t.Fatal(err)
		}
		w2 := uint32(1 + rng.Intn(3))
		for r := uint32(0); r < w2; r++ {
			rank, err := NewRank(corpus, r, w2, from)
			if err != nil {
				t.Fatal(err)
			}
			mix := rank.State().Mixture
			if len(mix) != 2 || mix[1].Step != uint64(steps) || !reflect.DeepEqual(mix[1].Weights, want) {
				t.Fatalf("seed %d: mixture log after the change: %+v", seed, mix)
			}
			where := fmt.Sprintf("seed %d rank %d/%d", seed, r, w2)
			checkFollows(t, where, rank, after, want)
			// Saved and resumed again with the same mixture (scaled): no change.
			again := saveWorldOf(t, corpus, w2, rank, r, from)
			checkNoChange(t, where, after, r, w2, again)
		}
		corpus.Close()
	}
}

// checkFollows checks that rank's next 400 lines follow the weights want
// within one line, from the first on.
func checkFollows(t *testing.T, where string, rank *Rank, cfg Config, want []float64) {
	t.Helper()
	var sum float64
	for _, w := range want {
		sum += w
	}
	lines := make([]int, len(want))
	buf := batchBuf(cfg)
	for total := 1; total <= 400; total++ {
		p, err := rank.NextBatch(buf)
		if err != nil {
			t.Fatal(err)
		}
		for d, n := range p.DatasetLines {
			lines[d] += n
		}
		for d := range want {
			ideal := float64(total) * want[d] / sum
			if diff := float64(lines[d]) - ideal; diff > 1 || diff < -1 {
				t.Fatalf("%s, %d lines after the change: dataset %d has %d lines, new weights say %.2f",
					where, total, d, lines[d], ideal)
			}
		}
	}
}

// checkNoChange resumes rank r of w from a state saved under cfg's weights
// with those weights scaled: the same mixture, so no change may be logged.
func checkNoChange(t *testing.T, where string, cfg Config, r, w uint32, from *state.Restored) {
	t.Helper()
	scaled := cfg
	scaled.Datasets = append([]Dataset(nil), cfg.Datasets...)
	for i := range scaled.Datasets {
		scaled.Datasets[i].Weight *= 3
	}
	c, err := OpenCorpus(scaled)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rank, err := NewRank(c, r, w, from)
	if err != nil {
		t.Fatal(err)
	}
	if got := rank.State().Mixture; len(got) != 2 {
		t.Fatalf("%s: resuming with proportional weights logged a change: %+v", where, got)
	}
}

// saveWorldOf saves rank r's current state with the other ranks of a world of
// w at their restored state, as a checkpoint folder would hold them when only
// rank r ran on; the merge needs every shard once.
func saveWorldOf(t *testing.T, c *Corpus, w uint32, rank *Rank, r uint32, from *state.Restored) *state.Restored {
	t.Helper()
	var states []state.Rank
	for o := uint32(0); o < w; o++ {
		if o == r {
			st := rank.State()
			st.Step = from.Step
			states = append(states, st)
			continue
		}
		other, err := NewRank(c, o, w, from)
		if err != nil {
			t.Fatal(err)
		}
		states = append(states, other.State())
	}
	return saveWorld(t, c.Fingerprint(), states)
}
