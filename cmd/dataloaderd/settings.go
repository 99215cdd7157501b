package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"
)

// daemonConfig is the daemon's configuration: a JSON file (--config) read
// first, flags on top. Each field is one row of settings() (settings_table.go),
// which gives its key (the field's json tag; TestSettingsTable holds them
// together), flag, default, help and check; the README's "Daemon flags" table
// is written from the same rows.
type daemonConfig struct {
	Socket                 string   `json:"socket"`
	MetricsAddr            string   `json:"metrics_addr"`
	AllowRoots             []string `json:"allow_roots"`
	ShmDir                 string   `json:"shm_dir"`
	Slots                  int      `json:"slots"`
	AttachWithin           string   `json:"attach_within"`
	IdleLimit              string   `json:"idle_limit"`
	KeepDetached           string   `json:"keep_detached"`
	StallLog               string   `json:"stall_log"`
	MaxSessionsPerUser     int      `json:"max_sessions_per_user"`
	RingBudgetMB           int      `json:"ring_budget_mb"`
	MemoryReserveMB        int      `json:"memory_reserve_mb"`
	LogLevel               string   `json:"log_level"`
	StopTimeout            string   `json:"stop_timeout"`
	ExitWithParent         int      `json:"exit_with_parent"`
	TokenizeWorkers        int      `json:"tokenize_workers"`
	TokenCacheMB           int      `json:"token_cache_mb"`
	TokenizerDirs          []string `json:"tokenizer_dirs"`
	BatchScheduling        bool     `json:"batch_scheduling"`
	CUDALibrary            string   `json:"cuda_library"`
	ObjectCacheMB          int      `json:"object_cache_mb"`
	ObjectCacheDir         string   `json:"object_cache_dir"`
	ObjectCacheDiskMB      int      `json:"object_cache_disk_mb"`
	ObjectBlockKB          int      `json:"object_block_kb"`
	ObjectConcurrency      int      `json:"object_concurrency"`
	ObjectRetryFor         string   `json:"object_retry_for"`
	ObjectPathStyle        string   `json:"object_path_style"`
	ObjectAllowUnversioned bool     `json:"object_allow_unversioned"`
	RequireWorkingSet      bool     `json:"object_require_working_set"`
}

// checked holds what daemonConfig.check parsed from the settings' text.
type checked struct {
	attachWithin, stopTimeout, idleLimit, keepDetached, objectRetryFor, stallLog time.Duration
	logLevel                                                                     zapcore.Level
}

// A setting is one daemon setting, declared once: its config-file key, its
// flag, its field of daemonConfig with its default and check (value), the
// line --help prints and its row of the README's table. In help and
// docDefault, "{}" stands for the default as text.
type setting struct {
	key, flag  string
	value      value
	help       string // --help
	docDefault string // the README's default column
	doc        string // the README's meaning column
}

// A value is a setting's field of daemonConfig, seen from its type: it
// sets the default, registers the flag, and checks what the field holds.
type value interface {
	setDefault(cfg *daemonConfig)
	defaultText() string
	// register adds the flag to fs and returns what lands its value in a
	// config, called when the flag was given.
	register(fs *flag.FlagSet, name, usage string) (land func(cfg *daemonConfig))
	check(key string, cfg *daemonConfig, ok *checked) error
	// field is a pointer to the field in cfg (TestSettingsTable holds the
	// key to its json tag).
	field(cfg *daemonConfig) any
}

// configFlag is --config, the flag that is not a setting.
var configFlag = setting{flag: "config", help: "JSON file of daemon settings, read before the flags",
	doc: "A JSON file with the keys above, read first; flags override it. Unknown keys are refused."}

// usageText is s's help for --help, its default written in.
func (s setting) usageText() string {
	return strings.ReplaceAll(s.help, "{}", s.value.defaultText())
}

// parseServe reads the serve command's settings: each setting's default,
// then the --config file over them, then the flags given over both. It
// checks nothing but the syntax of the flags (daemonConfig.check does).
func parseServe(args []string, stderr io.Writer) (daemonConfig, error) {
	table := settings()
	var cfg daemonConfig
	for _, s := range table {
		s.value.setDefault(&cfg)
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configFile := fs.String(configFlag.flag, "", configFlag.help)
	land := make(map[string]func(*daemonConfig), len(table))
	for _, s := range table {
		land[s.flag] = s.value.register(fs, s.flag, s.usageText())
	}
	if err := parseFlags(fs, serveUsage, args, stderr); err != nil {
		return cfg, err
	}
	if err := readConfigFile(*configFile, &cfg); err != nil {
		return cfg, err
	}
	fs.Visit(func(f *flag.Flag) {
		if l := land[f.Name]; l != nil {
			l(&cfg)
		}
	})
	if err := noArgs(fs); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// readConfigFile decodes the JSON file at path (none when empty) over cfg,
// refusing unknown keys.
func readConfigFile(path string, cfg *daemonConfig) error {
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(cfg); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

// check validates every setting in the table's order, the first bad one
// named, and returns what it parsed.
func (cfg daemonConfig) check() (checked, error) {
	var ok checked
	for _, s := range settings() {
		if err := s.value.check(s.key, &cfg, &ok); err != nil {
			return ok, err
		}
	}
	return ok, nil
}

// intValue is an int setting.
type intValue struct {
	get   func(*daemonConfig) *int
	def   int
	valid func(key string, v int) error // nil: any value
}

func (v intValue) setDefault(cfg *daemonConfig) { *v.get(cfg) = v.def }
func (v intValue) field(cfg *daemonConfig) any  { return v.get(cfg) }
func (v intValue) defaultText() string          { return strconv.Itoa(v.def) }

func (v intValue) register(fs *flag.FlagSet, name, usage string) func(*daemonConfig) {
	p := fs.Int(name, 0, usage)
	return func(cfg *daemonConfig) { *v.get(cfg) = *p }
}

func (v intValue) check(key string, cfg *daemonConfig, _ *checked) error {
	if v.valid == nil {
		return nil
	}
	return v.valid(key, *v.get(cfg))
}

// stringValue is a string setting.
type stringValue struct {
	get   func(*daemonConfig) *string
	def   string
	valid func(key, v string, ok *checked) error // nil: any value
}

func (v stringValue) setDefault(cfg *daemonConfig) { *v.get(cfg) = v.def }
func (v stringValue) field(cfg *daemonConfig) any  { return v.get(cfg) }
func (v stringValue) defaultText() string          { return v.def }

func (v stringValue) register(fs *flag.FlagSet, name, usage string) func(*daemonConfig) {
	p := fs.String(name, "", usage)
	return func(cfg *daemonConfig) { *v.get(cfg) = *p }
}

func (v stringValue) check(key string, cfg *daemonConfig, ok *checked) error {
	if v.valid == nil {
		return nil
	}
	return v.valid(key, *v.get(cfg), ok)
}

// boolValue is a bool setting; its flag shows a true default itself.
type boolValue struct {
	get func(*daemonConfig) *bool
	def bool
}

func (v boolValue) setDefault(cfg *daemonConfig)                { *v.get(cfg) = v.def }
func (v boolValue) field(cfg *daemonConfig) any                 { return v.get(cfg) }
func (v boolValue) defaultText() string                         { return strconv.FormatBool(v.def) }
func (v boolValue) check(string, *daemonConfig, *checked) error { return nil }

func (v boolValue) register(fs *flag.FlagSet, name, usage string) func(*daemonConfig) {
	p := fs.Bool(name, v.def, usage)
	return func(cfg *daemonConfig) { *v.get(cfg) = *p }
}

// durationValue is a duration setting, kept as text (as the config file
// gives it) until check parses it into its field of checked.
type durationValue struct {
	get    func(*daemonConfig) *string
	def    time.Duration
	zeroOK bool // 0 means none; else it must be positive
	into   func(*checked) *time.Duration
}

func (v durationValue) setDefault(cfg *daemonConfig) { *v.get(cfg) = v.def.String() }
func (v durationValue) field(cfg *daemonConfig) any  { return v.get(cfg) }
func (v durationValue) defaultText() string          { return shortDuration(v.def) }

func (v durationValue) register(fs *flag.FlagSet, name, usage string) func(*daemonConfig) {
	p := fs.Duration(name, 0, usage)
	return func(cfg *daemonConfig) { *v.get(cfg) = p.String() }
}

func (v durationValue) check(key string, cfg *daemonConfig, ok *checked) error {
	text := *v.get(cfg)
	d, err := time.ParseDuration(text)
	switch {
	case v.zeroOK && (err != nil || d < 0):
		return fmt.Errorf("%s %q: want a duration such as %s, or 0 for none", key, text, v.defaultText())
	case !v.zeroOK && (err != nil || d <= 0):
		return fmt.Errorf("%s %q: want a positive duration such as %s", key, text, v.defaultText())
	}
	*v.into(ok) = d
	return nil
}

// shortDuration writes d as a person would: 1m, 6h, 10s (not 1m0s).
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// listValue is a repeatable flag, a list in the config file. Flags given
// replace the file's list; no check.
type listValue struct {
	get func(*daemonConfig) *[]string
}

func (v listValue) setDefault(*daemonConfig)                    {}
func (v listValue) field(cfg *daemonConfig) any                 { return v.get(cfg) }
func (v listValue) defaultText() string                         { return "" }
func (v listValue) check(string, *daemonConfig, *checked) error { return nil }

func (v listValue) register(fs *flag.FlagSet, name, usage string) func(*daemonConfig) {
	var m multiFlag
	fs.Var(&m, name, usage)
	return func(cfg *daemonConfig) { *v.get(cfg) = m }
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
