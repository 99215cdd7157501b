package stream

import (
	"fmt"
	"math"
	"math/rand"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/state"
)

// testSchedule is a warm-up mix, a ramp to a main mix, and an annealing mix
// that drops the first dataset, over three datasets.
func testSchedule(rng *rand.Rand) []state.SchedulePoint {
	a := uint64(3 + rng.Intn(10))
	b := a + uint64(5+rng.Intn(20))
	c := b + uint64(3+rng.Intn(15))
	return []state.SchedulePoint{
		{Step: 0, Weights: []float64{3, 1, 1}},
		{Step: a, Weights: []float64{3, 1, 1}},
		{Step: b, Weights: []float64{1, 2, 4}, Linear: true},
		{Step: c, Weights: []float64{0, 1, 1}},
	}
}

func TestScheduleWeights(t *testing.T) {
	pts := []state.SchedulePoint{
		{Step: 5, Weights: []float64{1, 0}},
		{Step: 10, Weights: []float64{3, 2}, Linear: true},
		{Step: 12, Weights: []float64{0, 1}},
	}
	for _, tc := range []struct {
		step uint64
		want []float64
	}{{0, []float64{1, 0}}, {5, []float64{1, 0}}, {6, []float64{1.4, 0.4}}, {9, []float64{2.6, 1.6}},
		{10, []float64{3, 2}}, {11, []float64{3, 2}}, {12, []float64{0, 1}}, {1 << 40, []float64{0, 1}}} {
		got := state.ScheduleWeights(pts, tc.step, nil)
		for i := range got {
			if math.Abs(got[i]-tc.want[i]) > 1e-12 {
				t.Fatalf("weights at step %d: %v, want %v", tc.step, got, tc.want)
			}
		}
	}
}

// scheduleTarget is what a schedule gives each dataset over steps 1..s of
// lines lines each: the sum of its share of the weights at every step.
func scheduleTarget(pts []state.SchedulePoint, s uint64, lines int) []float64 {
	var out []float64
	for t := uint64(1); t <= s; t++ {
		w := state.ScheduleWeights(pts, t, nil)
		var sum float64
		for _, x := range w {
			sum += x
		}
		if out == nil {
			out = make([]float64, len(w))
		}
		for d, x := range w {
			out[d] += float64(lines) * x / sum
		}
	}
	return out
}

// runLines takes n batches of a rank (fewer at the end) and returns their
// tokens; lines, when not nil, gets the lines they served of each dataset.
func runLines(t *testing.T, rank *Rank, cfg Config, n int, lines []float64) [][]int32 {
	t.Helper()
	var out [][]int32
	for i := 0; i < n; i++ {
		buf := batchBuf(cfg)
		p, err := rank.NextBatch(buf)
		if err != nil {
			t.Fatal(err)
		}
		if p.Lines == 0 {
			break
		}
		for d, k := range p.DatasetLines {
			if lines != nil {
				lines[d] += float64(k)
			}
		}
		out = append(out, buf[:p.Lines*cfg.LineTokens()])
	}
	return out
}

// TestScheduleTracksItsIntegral: under a schedule with a warm-up mix, a
// linear ramp, and a mix that drops a dataset, the lines a rank served of
// each dataset stay within one line of the schedule integrated over the
// steps, at every step; through a save in the middle of the ramp and a
// resume on another world size, the world together stays within one line
// per rank; and a dataset whose weight is 0 gets no line.
func TestScheduleTracksItsIntegral(t *testing.T) {
	for seed := int64(1); seed <= 12; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			ds, _ := testCorpus(t, rng)
			cfg := randomConfig(rng, ds)
			cfg.Epochs = 0
			cfg.Schedule = testSchedule(rng)
			corpus, err := OpenCorpus(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer corpus.Close()
			B := int(cfg.BatchSize)
			pts := cfg.Schedule
			total := pts[len(pts)-1].Step + 10
			// One rank, step by step.
			rank, err := NewRank(corpus, 0, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]float64, len(ds))
			for s := uint64(1); s <= total; s++ {
				buf := batchBuf(cfg)
				p, err := rank.NextBatch(buf)
				if err != nil || p.Lines != B {
					t.Fatalf("step %d: %d lines, %v", s, p.Lines, err)
				}
				for d, n := range p.DatasetLines {
					got[d] += float64(n)
					if n > 0 && state.ScheduleWeights(pts, s, nil)[d] == 0 {
						t.Fatalf("step %d: %d lines of dataset %d, whose weight is 0", s, n, d)
					}
				}
				want := scheduleTarget(pts, s, B)
				for d := range got {
					if math.Abs(got[d]-want[d]) > 1+1e-9 {
						t.Fatalf("step %d: dataset %d served %v lines, the schedule integrated gives %.3f", s, d, got[d], want[d])
					}
				}
			}
			// Two ranks, saved in the middle of the ramp, resumed on one to
			// four ranks: each rank resumed on two serves what the
			// uninterrupted rank did, and the world stays within one line a
			// rank of the integral.
			mid := (pts[1].Step + pts[2].Step) / 2
			var states []state.Rank
			var rest [][][]int32
			world := make([]float64, len(ds))
			for r := uint32(0); r < 2; r++ {
				rank, _ := NewRank(corpus, r, 2, nil)
				runLines(t, rank, cfg, int(mid), world)
				states = append(states, rank.State())
				rest = append(rest, run(t, rank, cfg, 15))
			}
			from := saveWorld(t, corpus.Fingerprint(), states)
			for r := uint32(0); r < 2; r++ {
				rank, err := NewRank(corpus, r, 2, from)
				if err != nil {
					t.Fatal(err)
				}
				if got := run(t, rank, cfg, 15); !reflect.DeepEqual(got, rest[r]) {
					t.Fatalf("rank %d resumed in the ramp (step %d) differs from the uninterrupted run", r, mid)
				}
			}
			w := uint32(1 + rng.Intn(4))
			for r := uint32(0); r < w; r++ {
				rank, err := NewRank(corpus, r, w, from)
				if err != nil {
					t.Fatal(err)
				}
				runLines(t, rank, cfg, int(total-mid), world)
			}
			// The world's target: 2 ranks' lines up to mid, then w ranks'.
			want := scheduleTarget(pts, mid, 2*B)
			after := scheduleTarget(pts, total, int(w)*B)
			before := scheduleTarget(pts, mid, int(w)*B)
			slack := float64(2 + w)
			for d := range want {
				want[d] += after[d] - before[d]
				if math.Abs(world[d]-want[d]) > slack {
					t.Fatalf("dataset %d: the world served %v lines through the resume on %d ranks, the schedule gives %.2f",
						d, world[d], w, want[d])
				}
			}
		})
	}
}

// TestScheduleExactlyOnce: every token once per epoch through saves,
// crashes and resumes on other world sizes under a schedule, with the
// schedule changed at some resumes (a change logged at that step).
func TestScheduleExactlyOnce(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			ds, all := testCorpus(t, rng)
			cfg := randomConfig(rng, ds)
			cfg.Epochs = uint32(1 + rng.Intn(2))
			// A bounded run ends when the datasets of positive weight do: a
			// dataset left at weight 0 keeps its cursors and its tokens.
			cfg.Schedule = testSchedule(rng)
			cfg.Schedule[len(cfg.Schedule)-1].Weights[0] = 0.5
			corpus, err := OpenCorpus(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer corpus.Close()
			served := crashAndRescale(t, rng, cfg, corpus.Fingerprint(), 5, int(min(cfg.LogicalShards, 5)), 25,
				func(round int, final bool) *Corpus {
					if round == 0 || rng.Intn(2) != 0 {
						return corpus
					}
					rcfg := cfg
					rcfg.Schedule = slices.Clone(cfg.Schedule)
					rcfg.Schedule[len(rcfg.Schedule)-1].Weights = []float64{1, 1, float64(1 + rng.Intn(3))}
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

// TestScheduleLogged: a schedule is in the state's mixture log, a resume
// under the same schedule adds nothing, and a resume under another logs a
// change at the resumed step.
func TestScheduleLogged(t *testing.T) {
	rng := rand.New(rand.NewSource(4))
	ds, _ := testCorpus(t, rng)
	cfg := randomConfig(rng, ds)
	cfg.Epochs = 0
	cfg.Schedule = testSchedule(rng)
	corpus, err := OpenCorpus(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer corpus.Close()
	rank, _ := NewRank(corpus, 0, 1, nil)
	run(t, rank, cfg, 7)
	st := rank.State()
	if len(st.Mixture) != 1 || !reflect.DeepEqual(st.Mixture[0].Schedule, cfg.Schedule) {
		t.Fatalf("mixture log %+v, want the schedule at step 0", st.Mixture)
	}
	from := saveWorld(t, corpus.Fingerprint(), []state.Rank{st})
	same, _ := NewRank(corpus, 0, 1, from)
	if got := same.State().Mixture; len(got) != 1 {
		t.Fatalf("a resume under the same schedule logged %+v", got)
	}
	other := cfg
	other.Schedule = slices.Clone(cfg.Schedule)
	other.Schedule[0].Weights = []float64{1, 1, 1}
	oc, err := OpenCorpus(other)
	if err != nil {
		t.Fatal(err)
	}
	defer oc.Close()
	changed, err := NewRank(oc, 0, 1, from)
	if err != nil {
		t.Fatal(err)
	}
	got := changed.State().Mixture
	if len(got) != 2 || got[1].Step != 7 || !reflect.DeepEqual(got[1].Schedule, other.Schedule) {
		t.Fatalf("mixture log after a resume under another schedule: %+v", got)
	}
}

// TestDatasetAddedAtResume: a dataset added to the config at a resume
// (after the saved ones) starts from fresh cursors while the others keep
// theirs: through the save, every token of the old datasets is served once,
// and the new one's from the resume on; a dataset dropped from the config,
// or one moved, is refused with its name (weight 0 leaves a dataset out of
// the mix and keeps its cursors).
func TestDatasetAddedAtResume(t *testing.T) {
	for seed := int64(1); seed <= 10; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			ds, all := testCorpus(t, rng)
			cfg := randomConfig(rng, ds)
			cfg.Epochs = 1
			cfg.Datasets = []Dataset{ds[0], ds[2], ds[1]}
			old := cfg
			old.Datasets = cfg.Datasets[:2] // b comes at the resume, after them
			oc, err := OpenCorpus(old)
			if err != nil {
				t.Fatal(err)
			}
			defer oc.Close()
			served := map[int32]int{}
			buf := batchBuf(cfg)
			line := cfg.LineTokens()
			var states []state.Rank
			w := uint32(1 + rng.Intn(2))
			for r := uint32(0); r < w; r++ {
				rank, _ := NewRank(oc, r, w, nil)
				for i := rng.Intn(15); i > 0; i-- {
					p, err := rank.NextBatch(buf)
					if err != nil {
						t.Fatal(err)
					}
					count(served, buf[:p.Lines*line])
				}
				states = append(states, rank.State())
			}
			nc, err := OpenCorpus(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			var names []string
			var blobs [][]byte
			for _, st := range states {
				b, err := state.Encode(oc.Fingerprint(), st)
				if err != nil {
					t.Fatal(err)
				}
				names = append(names, fmt.Sprintf("rank %d", st.DPRank))
				blobs = append(blobs, b)
			}
			from, err := state.Merge(nc.Fingerprint(), names, blobs)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(from.Added, []string{"b"}) {
				t.Fatalf("added %v, want b", from.Added)
			}
			w2 := uint32(1 + rng.Intn(3))
			for r := uint32(0); r < w2; r++ {
				rank, err := NewRank(nc, r, w2, from)
				if err != nil {
					t.Fatal(err)
				}
				if got := rank.State().Mixture; len(got) < 2 || len(got[len(got)-1].Weights) != 3 {
					t.Fatalf("the resume with a dataset added logs no change of weights: %+v", got)
				}
				for {
					p, err := rank.NextBatch(buf)
					if err != nil {
						t.Fatal(err)
					}
					if p.Lines == 0 {
						break
					}
					count(served, buf[:p.Lines*line])
				}
			}
			checkServed(t, served, all, 1)
			// Dropping a dataset at resume is refused, by name.
			if _, err := state.Merge(oc.Fingerprint(), names[:0], nil); err == nil {
				t.Fatal("an empty world merged")
			}
			newer := make([][]byte, 0, len(states))
			for _, st := range states {
				b, _ := state.Encode(nc.Fingerprint(), state.Rank{DPRank: st.DPRank, DPSize: st.DPSize, Step: st.Step, Shards: st.Shards})
				newer = append(newer, b)
			}
			if _, err := state.Merge(oc.Fingerprint(), names, newer); err == nil || !strings.Contains(err.Error(), `dataset "b" is in the saved state but not in the config`) {
				t.Fatalf("a dataset dropped at resume: %v", err)
			}
			moved := cfg
			moved.Datasets = []Dataset{ds[2], ds[0], ds[1]}
			mc, err := OpenCorpus(moved)
			if err != nil {
				t.Fatal(err)
			}
			defer mc.Close()
			if _, err := state.Merge(mc.Fingerprint(), names, blobs); err == nil || !strings.Contains(err.Error(), "add new ones after them") {
				t.Fatalf("saved datasets reordered at resume: %v", err)
			}
		})
	}
}

// TestSetWeightsExactlyOnce: every token once per epoch through saves,
// crashes and resumes on other world sizes while ranks change their weights
// at run time at random steps (a dataset at 0 now and then), the last
// change leaving every weight positive so that the epoch ends.
func TestSetWeightsExactlyOnce(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			ds, all := testCorpus(t, rng)
			cfg := randomConfig(rng, ds)
			cfg.Epochs = 1
			corpus, err := OpenCorpus(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer corpus.Close()
			served := map[int32]int{}
			buf := batchBuf(cfg)
			line := cfg.LineTokens()
			var from *state.Restored
			for round := 0; round < 4; round++ {
				final := round == 3
				w := uint32(1 + rng.Intn(int(min(cfg.LogicalShards, 4))))
				var states []state.Rank
				for r := uint32(0); r < w; r++ {
					rank, err := NewRank(corpus, r, w, from)
					if err != nil {
						t.Fatal(err)
					}
					for i := 0; final || i < 12; i++ {
						if rng.Intn(4) == 0 || final && i == 0 {
							ws := []float64{float64(rng.Intn(3)), float64(rng.Intn(3)), float64(1 + rng.Intn(3))}
							if final {
								ws[0], ws[1] = ws[0]+1, ws[1]+1
							}
							after := rank.Step() + uint64(rng.Intn(2))
							if final {
								// A rank whose datasets of positive weight ran out ends:
								// the last change must be in effect before that.
								after = rank.Step()
							}
							if err := rank.SetWeights(after, ws); err != nil {
								t.Fatal(err)
							}
						}
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
				}
				if !final {
					from = saveWorld(t, corpus.Fingerprint(), states)
				}
			}
			checkServed(t, served, all, 1)
		})
	}
}

// TestSetWeightsQueued: changes asked for two later steps both take effect,
// each at its step; a newer change for an earlier step replaces the ones
// after it.
func TestSetWeightsQueued(t *testing.T) {
	rng := rand.New(rand.NewSource(6))
	ds, _ := testCorpus(t, rng)
	cfg := randomConfig(rng, ds)
	cfg.Epochs = 0
	corpus, err := OpenCorpus(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer corpus.Close()
	only := func(d int) []float64 {
		w := make([]float64, len(ds))
		w[d] = 1
		return w
	}
	rank, _ := NewRank(corpus, 0, 1, nil)
	if err := rank.SetWeights(3, only(0)); err != nil {
		t.Fatal(err)
	}
	if err := rank.SetWeights(6, only(1)); err != nil {
		t.Fatal(err)
	}
	buf := batchBuf(cfg)
	for s := 1; s <= 9; s++ {
		p, err := rank.NextBatch(buf)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case s > 6 && p.DatasetLines[1] != p.Lines, s > 3 && s <= 6 && p.DatasetLines[0] != p.Lines:
			t.Fatalf("step %d: lines by dataset %v", s, p.DatasetLines)
		}
	}
	if got := rank.State().Mixture; len(got) != 3 || got[1].Step != 3 || got[2].Step != 6 {
		t.Fatalf("mixture log %+v, want changes at 3 and 6", got)
	}
	// A change for step 12 queued, then one for step 11: 11's wins after 11.
	if err := rank.SetWeights(12, only(0)); err != nil {
		t.Fatal(err)
	}
	if err := rank.SetWeights(11, only(2)); err != nil {
		t.Fatal(err)
	}
	for s := 10; s <= 15; s++ {
		p, err := rank.NextBatch(buf)
		if err != nil {
			t.Fatal(err)
		}
		if s > 11 && p.DatasetLines[2] != p.Lines {
			t.Fatalf("step %d: lines by dataset %v, want dataset 2's alone", s, p.DatasetLines)
		}
	}
}
