package stream

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/state"
)

func TestConfigErrors(t *testing.T) {
	ok := func() Config {
		return Config{SeqLen: 8, BatchSize: 2, LogicalShards: 4, EOS: 0, BOS: -1,
			Datasets: []Dataset{{Name: "a", Path: "/x", Format: "megatron", Weight: 1}, {Name: "b", Path: "/y", Format: "tokens", Weight: 2}}}
	}
	cases := []struct {
		want string
		edit func(c *Config)
	}{
		{"seq_len must be at least 1, got 0", func(c *Config) { c.SeqLen = 0 }},
		{"batch_size must be at least 1", func(c *Config) { c.BatchSize = 0 }},
		{"logical_shards must be at least 1", func(c *Config) { c.LogicalShards = 0 }},
		// 2^32-1 was a fatal out-of-memory of the daemon in the shard cut.
		{"logical_shards must be at most 1048576, got 4294967295", func(c *Config) { c.LogicalShards = math.MaxUint32 }},
		{"shuffle_window must be at most", func(c *Config) { c.ShuffleWindow = MaxShuffleWindow + 1 }},
		{"at least one dataset", func(c *Config) { c.Datasets = nil }},
		{"eos_id must be in", func(c *Config) { c.EOS = -3 }},
		{"pad_id must be in", func(c *Config) { c.Pad = math.MaxInt32 + 1 }},
		{`dataset "a": unknown format "csv" (want megatron, tokens, arrow, parquet, jsonl)`, func(c *Config) { c.Datasets[0].Format = "csv" }},
		{`dataset "a": format jsonl is tokenized on the fly and needs a tokenizer`, func(c *Config) { c.Datasets[0].Format = "jsonl" }},
		{`dataset "a": format megatron is already tokenized; tokenizer "gpt2"`, func(c *Config) { c.Datasets[0].Tokenizer = "gpt2" }},
		{`dataset "a": on_bad_record applies to parquet and jsonl only`, func(c *Config) { c.Datasets[0].OnBadRecord = "skip" }},
		{`dataset "a": on_bad_record "drop": want error or skip`, func(c *Config) {
			c.Datasets[0].Format, c.Datasets[0].Tokenizer, c.Datasets[0].OnBadRecord = "jsonl", "gpt2", "drop"
		}},
		{`dataset "b": field applies to arrow, parquet and jsonl only`, func(c *Config) { c.Datasets[1].Field = "ids" }},
		{`dataset "b": weight must be a finite number >= 0, got -1`, func(c *Config) { c.Datasets[1].Weight = -1 }},
		{"weight must be a finite number", func(c *Config) { c.Datasets[1].Weight = math.NaN() }},
		{"every weight is zero", func(c *Config) { c.Datasets[0].Weight, c.Datasets[1].Weight = 0, 0 }},
		// 1e308 and 1e308 sum to +Inf, which starved a dataset; 1e308 and
		// 5e307 overflow when mixing multiplies them by counts of lines.
		{`weights "a" 1e+308, "b" 1e+308: the weights sum to +Inf, more than 1e+100`, func(c *Config) {
			c.Datasets[0].Weight, c.Datasets[1].Weight = 1e308, 1e308
		}},
		{`the weights sum to 1.5e+308, more than 1e+100`, func(c *Config) { c.Datasets[0].Weight, c.Datasets[1].Weight = 1e308, 5e307 }},
		{`schedule[1] (step 9): weights "a" 1e+308, "b" 1e+308: the weights sum to +Inf`, func(c *Config) {
			c.Schedule = []state.SchedulePoint{{Weights: []float64{1, 1}}, {Step: 9, Weights: []float64{1e308, 1e308}}}
		}},
		{`name "a" is used twice`, func(c *Config) { c.Datasets[1].Name = "a" }},
		{"datasets[1]: name is empty", func(c *Config) { c.Datasets[1].Name = "" }},
		{`dataset "a": path is empty`, func(c *Config) { c.Datasets[0].Path = "" }},
	}
	for _, c := range cases {
		cfg := ok()
		c.edit(&cfg)
		err := cfg.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err = %v, want ErrInvalidConfig containing %q", err, c.want)
		}
	}
	if err := ok().Validate(); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	cfg := ok()
	for _, rc := range []struct {
		rank, size uint32
		want       string
	}{
		{2, 2, "dp_rank 2 is out of range for dp_size 2"},
		{0, 0, "dp_size must be at least 1"},
		{0, 5, "logical_shards (4) must be at least dp_size (5)"},
	} {
		if err := cfg.ValidateRank(rc.rank, rc.size); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), rc.want) {
			t.Errorf("rank %d of %d: %v, want %q", rc.rank, rc.size, err, rc.want)
		}
	}
}

// TestWeightsThatOverflowRefused: a change of weights at run time whose sum
// is not a number at most state.MaxWeightSum is refused naming the values
// (1e308:1e308 used to sum to +Inf and starve a dataset), and so is a
// restored mixture log holding such weights; large weights within the bound
// mix as their ratio does.
func TestWeightsThatOverflowRefused(t *testing.T) {
	corpus, cfg := pipelineFixture(t, 0)
	rank, _ := NewRank(corpus, 0, 1, nil)
	n := len(cfg.Datasets)
	huge := make([]float64, n)
	for d := range huge {
		huge[d] = 1e308
	}
	if err := rank.SetWeights(0, huge); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "sum to +Inf") ||
		!strings.Contains(err.Error(), `"a" 1e+308`) {
		t.Fatalf("set_weights 1e308 each: %v", err)
	}
	st := rank.State()
	st.Mixture = []state.MixChange{{Weights: huge}}
	if _, err := NewRank(corpus, 0, 1, saveWorldUnchecked(t, corpus.Fingerprint(), st)); !errors.Is(err, state.ErrMismatch) ||
		!strings.Contains(err.Error(), `restored mixture[0] (step 0) weights [1e+308 1e+308 1e+308]: weights "a" 1e+308`) ||
		!strings.Contains(err.Error(), "sum to +Inf, more than 1e+100") {
		t.Fatalf("a restored log of weights 1e308 each: %v", err)
	}
	large := make([]float64, n)
	for d := range large {
		large[d] = 1e99
	}
	if err := rank.SetWeights(0, large); err != nil {
		t.Fatal(err)
	}
	got := make([]float64, n)
	runLines(t, rank, cfg, 12, got)
	for d := range got {
		if math.Abs(got[d]-got[0]) > 1 {
			t.Fatalf("equal weights of 1e99 served lines %v", got)
		}
	}
}

// saveWorldUnchecked merges one rank's state as a resume does, without
// Decode's checks: what a forged run part of a sharded state gives.
func saveWorldUnchecked(t *testing.T, fp state.Fingerprint, st state.Rank) *state.Restored {
	t.Helper()
	return &state.Restored{Step: st.Step, Shards: st.Shards, FromSize: st.DPSize, Mixture: st.Mixture}
}

// TestAllZeroRestoredRefused: a restored log that queues a change of all
// zero weights, or holds a schedule point of all zeros, is refused by the
// rank it would restore, naming the entry and the values: what a forged
// run part of a sharded state gives (Decode's checks skipped). Before, the
// first was taken and at its step every weight was zero, pickDataset found
// no dataset and the rank reported the end of its data with tokens left;
// the second gave NaN shares.
func TestAllZeroRestoredRefused(t *testing.T) {
	corpus, cfg := pipelineFixture(t, 0)
	n := len(cfg.Datasets)
	ones, zeros := make([]float64, n), make([]float64, n)
	for d := range ones {
		ones[d] = 1
	}
	for _, c := range []struct {
		name    string
		mixture []state.MixChange
		want    string
	}{
		{"queued change", []state.MixChange{{Weights: ones}, {Step: 5, Weights: zeros, Runtime: true}},
			fmt.Sprintf("mixture[1] (step 5) weights %v: every weight is zero", zeros)},
		{"schedule point", []state.MixChange{{Weights: ones,
			Schedule: []state.SchedulePoint{{Weights: ones}, {Step: 4, Weights: zeros}}}},
			fmt.Sprintf("mixture[0] schedule point 1 (step 4) weights %v: every weight is zero", zeros)},
	} {
		t.Run(c.name, func(t *testing.T) {
			rank, _ := NewRank(corpus, 0, 1, nil)
			run(t, rank, cfg, 3)
			st := rank.State()
			st.Mixture = c.mixture
			_, err := NewRank(corpus, 0, 1, saveWorldUnchecked(t, corpus.Fingerprint(), st))
			if !errors.Is(err, state.ErrMismatch) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("restored: %v, want ErrMismatch naming %q", err, c.want)
			}
		})
	}
}

// TestWeightsByName: weights given by name come in the datasets' order;
// a name no dataset has, and a dataset without a weight, are refused by
// name under the label and noun given.
func TestWeightsByName(t *testing.T) {
	ds := []Dataset{{Name: "web"}, {Name: "code"}, {Name: "math"}}
	ws, err := WeightsByName("set_weights", "dataset of the job", ds, map[string]float64{"math": 3, "web": 1, "code": 0})
	if err != nil || !reflect.DeepEqual(ws, []float64{1, 0, 3}) {
		t.Fatalf("weights %v, %v; want [1 0 3] in the datasets' order", ws, err)
	}
	for _, c := range []struct {
		weights map[string]float64
		want    string
	}{
		{map[string]float64{"web": 1, "code": 1}, `schedule[2] (step 9): dataset "math" has no weight (give every dataset one, 0 to leave it out)`},
		{map[string]float64{"web": 1, "code": 1, "math": 1, "books": 1, "arxiv": 1}, `schedule[2] (step 9): no dataset is named "arxiv"`},
		{map[string]float64{"web": 1, "books": 1}, `schedule[2] (step 9): no dataset is named "books"`},
	} {
		_, err := WeightsByName("schedule[2] (step 9)", "dataset", ds, c.weights)
		if !errors.Is(err, ErrInvalidConfig) || !strings.HasSuffix(err.Error(), c.want) {
			t.Errorf("weights %v: %v; want ErrInvalidConfig ending %q", c.weights, err, c.want)
		}
	}
	_, err = WeightsByName("set_weights", "dataset of the job", ds, map[string]float64{"web": 1, "code": 1, "math": 1, "books": 1})
	if want := `set_weights: no dataset of the job is named "books"`; err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("an unknown name at run time: %v; want it ending %q", err, want)
	}
}
