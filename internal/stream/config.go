package stream

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/dataloaderd/dataloaderd/internal/errkind"
	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/state"
)

// ErrInvalidConfig marks a job config the daemon refuses; the message names
// the field and the value.
var ErrInvalidConfig = errkind.New(errkind.Invalid, "invalid config")

// Defaults for fields a job config may leave unset.
const (
	DefaultShuffleWindow = 8
	MaxShuffleWindow     = 4096
	maxSeqLen            = 1 << 24
	// MaxLogicalShards bounds a config's logical_shards: far more than any
	// world has ranks, and a shard's cut and state stay small (a rank's
	// state file holds a few dozen bytes per shard and dataset).
	MaxLogicalShards = 1 << 20
	// maxShardsInAll bounds the shards of all datasets together (about
	// 100 bytes of daemon memory each, and a few dozen in a state file).
	maxShardsInAll = 1 << 22
)

// Dataset is one dataset entry of a job config.
type Dataset struct {
	Name   string
	Path   string
	Format string
	Weight float64
	Dtype  string
	// Field is the token column (arrow) or the text column or field
	// (parquet, jsonl); empty picks the format's default.
	Field string
	// Tokenizer is required by the text formats: a built-in encoding name or
	// the path of a tokenizer.json or <encoding>.tiktoken file.
	Tokenizer string
	// OnBadRecord is "", "error" or "skip" (text formats).
	OnBadRecord string
}

// Config is a job config: what makes the token stream of every rank.
type Config struct {
	SeqLen        uint32
	BatchSize     uint32
	Seed          uint64
	LogicalShards uint32
	EOS           int64
	// BOS < 0 means no BOS token.
	BOS int64
	Pad int64
	// Epochs == 0 means unbounded.
	Epochs uint32
	// ShuffleWindow is the lines per line-shuffle window; 0 means the default,
	// 1 means lines in order.
	ShuffleWindow uint32
	// RunTokens, when not 0, reads each shard's units in runs of about
	// that many tokens of consecutive units: the runs are permuted, a
	// run's units read in order (runs.go). Datasets in object storage then
	// fetch each byte about once per epoch (docs/objects.md).
	RunTokens uint64
	Datasets  []Dataset
	// Metadata names what each batch carries beside the tokens (see
	// MetadataFields); empty: tokens only.
	Metadata []string
	// Positions is how position_ids count in a document continued from the
	// line before: PositionsRestart ("" too) or PositionsContinue.
	Positions string
	// MaskDocumentBoundaries makes loss_mask also mask each position whose
	// next token starts another document.
	MaskDocumentBoundaries bool
	// Schedule, when set, gives the mixing weights as a function of the
	// step (points in increasing step order, weights in dataset order)
	// instead of the datasets' constant weights.
	Schedule []state.SchedulePoint
	// SkipSteps are ranges of data steps whose batches are made and
	// dropped, never served (skips.go), in step order and apart. They do
	// not shape the stream: a resume may add them (state.ConfigSkips).
	SkipSteps []state.SkipRange
	// Blocklist names documents never to be served (blocklist.go); it is
	// not in the fingerprint: a resume may add one.
	Blocklist Blocklist
}

// LineTokens is the length of a line: seq_len + 1 (inputs and shifted labels).
func (c Config) LineTokens() int { return int(c.SeqLen) + 1 }

// Window is the effective line-shuffle window.
func (c Config) Window() uint64 {
	if c.ShuffleWindow == 0 {
		return DefaultShuffleWindow
	}
	return uint64(c.ShuffleWindow)
}

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, a...))
}

// Validate checks the config on its own; Validate does not open files.
func (c Config) Validate() error {
	_, err := c.validate()
	return err
}

// validate is Validate, returning each dataset's format, looked up once.
func (c Config) validate() ([]format, error) {
	if err := c.validateScalars(); err != nil {
		return nil, err
	}
	formats, err := c.validateDatasets()
	if err != nil {
		return nil, err
	}
	return formats, c.validateMetadata()
}

// validateScalars checks the config's fields other than its datasets.
func (c Config) validateScalars() error {
	switch {
	case c.SeqLen < 1:
		return invalid("seq_len must be at least 1, got %d", c.SeqLen)
	case c.SeqLen > maxSeqLen:
		return invalid("seq_len must be at most %d, got %d", maxSeqLen, c.SeqLen)
	case c.BatchSize < 1:
		return invalid("batch_size must be at least 1, got %d", c.BatchSize)
	case c.LogicalShards < 1:
		return invalid("logical_shards must be at least 1, got %d", c.LogicalShards)
	case c.LogicalShards > MaxLogicalShards:
		return invalid("logical_shards must be at most %d, got %d", MaxLogicalShards, c.LogicalShards)
	case c.ShuffleWindow > MaxShuffleWindow:
		return invalid("shuffle_window must be at most %d, got %d", MaxShuffleWindow, c.ShuffleWindow)
	case c.RunTokens != 0 && (c.RunTokens < MinRunTokens || c.RunTokens > MaxRunTokens):
		return invalid("run_tokens must be 0 (off) or in [%d, %d], got %d", MinRunTokens, uint64(MaxRunTokens), c.RunTokens)
	case len(c.Datasets) == 0:
		return invalid("datasets: at least one dataset is needed")
	case uint64(c.LogicalShards)*uint64(len(c.Datasets)) > maxShardsInAll:
		return invalid("logical_shards (%d) x datasets (%d) must be at most %d: every dataset is cut into that many shards",
			c.LogicalShards, len(c.Datasets), maxShardsInAll)
	}
	for name, v := range map[string]int64{"eos_id": c.EOS, "pad_id": c.Pad} {
		if v < 0 || v > math.MaxInt32 {
			return invalid("%s must be in [0, %d], got %d", name, math.MaxInt32, v)
		}
	}
	if c.BOS > math.MaxInt32 {
		return invalid("bos_id must be at most %d, got %d", math.MaxInt32, c.BOS)
	}
	if err := state.CheckSkips("skip_steps", c.SkipSteps, state.MaxSkipsPending); err != nil {
		return invalid("%v", err)
	}
	return nil
}

// validateDatasets checks the datasets, their weights and the schedule,
// and returns each dataset's format: the registry's entry with its opener.
func (c Config) validateDatasets() ([]format, error) {
	seen := map[string]bool{}
	formats := make([]format, len(c.Datasets))
	weights := make([]float64, len(c.Datasets))
	names := make([]string, len(c.Datasets))
	for i, d := range c.Datasets {
		f, known := lookupFormat(d.Format)
		format := f.Format
		switch {
		case d.Name == "":
			return nil, invalid("datasets[%d]: name is empty", i)
		case seen[d.Name]:
			return nil, invalid("datasets[%d]: name %q is used twice", i, d.Name)
		case d.Path == "":
			return nil, invalid("dataset %q: path is empty", d.Name)
		case !known:
			return nil, invalid("dataset %q: unknown format %q (want %s)", d.Name, d.Format, strings.Join(files.Names(nil), ", "))
		case format.Text && d.Tokenizer == "":
			return nil, invalid("dataset %q: format %s is tokenized on the fly and needs a tokenizer (a built-in encoding such as cl100k_base, or a tokenizer.json path)", d.Name, d.Format)
		case !format.Text && d.Tokenizer != "":
			return nil, invalid("dataset %q: format %s is already tokenized; tokenizer %q applies to %s only", d.Name, d.Format, d.Tokenizer, textFormats())
		case !format.Text && d.OnBadRecord != "":
			return nil, invalid("dataset %q: on_bad_record applies to %s only", d.Name, textFormats())
		case d.OnBadRecord != "" && d.OnBadRecord != "error" && d.OnBadRecord != "skip":
			return nil, invalid("dataset %q: on_bad_record %q: want error or skip", d.Name, d.OnBadRecord)
		case d.Field != "" && !files.HasField(format):
			return nil, invalid("dataset %q: field applies to %s only", d.Name, files.List(files.Names(files.HasField), "and"))
		}
		seen[d.Name] = true
		weights[i], names[i], formats[i] = d.Weight, d.Name, f
	}
	// Under a schedule the datasets' weights mix nothing and may all be 0.
	if err := state.CheckWeights(weights, names, len(c.Schedule) == 0); err != nil {
		return nil, invalid("datasets: %v", err)
	}
	if err := c.validateSchedule(names); err != nil {
		return nil, err
	}
	return formats, nil
}

// validateSchedule checks the mixture schedule: steps increasing, and at
// every point weights as state.CheckWeights wants them (a weight per
// dataset of names, finite and >= 0, some positive, their sum bounded).
func (c Config) validateSchedule(names []string) error {
	for i, p := range c.Schedule {
		switch {
		case i > 0 && p.Step <= c.Schedule[i-1].Step:
			return invalid("schedule[%d]: step %d is not after step %d of the point before", i, p.Step, c.Schedule[i-1].Step)
		case i == 0 && p.Linear:
			return invalid("schedule[0]: linear needs a point before it to ramp from")
		}
		if err := state.CheckWeights(p.Weights, names, true); err != nil {
			return invalid("schedule[%d] (step %d): %v", i, p.Step, err)
		}
	}
	return nil
}

// textFormats names the formats tokenized on the fly, for messages.
func textFormats() string { return files.List(files.Names(files.IsText), "and") }

// Checked is a job config that Validate accepted, with what follows from
// it alone: its slot layout. An open checks its config once (Check) and
// every floor below reads the Checked, checking nothing again.
type Checked struct {
	cfg    Config
	layout Layout
	// formats are the datasets' formats, in config order.
	formats []format
}

// Check validates cfg, looks up its datasets' formats and lays out its
// slot.
func Check(cfg Config) (Checked, error) {
	formats, err := cfg.validate()
	if err != nil {
		return Checked{}, err
	}
	return Checked{cfg: cfg, layout: cfg.Layout(), formats: formats}, nil
}

// Config is the checked config.
func (c Checked) Config() Config { return c.cfg }

// Layout is where a batch's arrays lie in a slot of the config's rings.
func (c Checked) Layout() Layout { return c.layout }

// ValidateRank checks a rank against the config.
func (c Config) ValidateRank(dpRank, dpSize uint32) error {
	switch {
	case dpSize < 1:
		return invalid("dp_size must be at least 1, got %d", dpSize)
	case dpRank >= dpSize:
		return invalid("dp_rank %d is out of range for dp_size %d", dpRank, dpSize)
	case c.LogicalShards < dpSize:
		return invalid("logical_shards (%d) must be at least dp_size (%d): shards are the unit of ownership", c.LogicalShards, dpSize)
	}
	return nil
}

// WeightsByName maps weights given by dataset name (a change at run time,
// a point of a schedule) onto the datasets' order: every dataset must have
// a weight (0 leaves it out), and no other name may. what labels the
// weights in errors ("set_weights", "schedule[2] (step 100)"); a name no
// dataset has is "no <noun> is named ..." (noun "dataset", "dataset of the
// job"). The weights' values are for state.CheckWeights to judge.
func WeightsByName(what, noun string, datasets []Dataset, weights map[string]float64) ([]float64, error) {
	index := make(map[string]int, len(datasets))
	for i, d := range datasets {
		index[d.Name] = i
	}
	for _, name := range slices.Sorted(maps.Keys(weights)) {
		if _, ok := index[name]; !ok {
			return nil, invalid("%s: no %s is named %q", what, noun, name)
		}
	}
	ws := make([]float64, len(datasets))
	for i, d := range datasets {
		w, ok := weights[d.Name]
		if !ok {
			return nil, invalid("%s: dataset %q has no weight (give every dataset one, 0 to leave it out)", what, d.Name)
		}
		ws[i] = w
	}
	return ws, nil
}
