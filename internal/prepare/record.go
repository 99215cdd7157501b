package prepare

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/source"
)

// recordExt ends the name of the record beside each output:
// <output>/<name>.prepare.json says how <name>.bin/.idx were made. Readers of
// Megatron datasets look only at .idx and .bin files, so it is never data.
const recordExt = ".prepare.json"

// recordVersion is the version of the record's format.
const recordVersion = 1

// Settings are what decide an output's tokens. Each output's record holds
// the settings it was made with; a later run into the same folder skips an
// output only when they are the ones it asks for.
type Settings struct {
	// Tokenizer is the encoding name or the tokenizer file, as given: it
	// names the tokenizer for people; TokenizerSHA256 is what is compared.
	Tokenizer       string `json:"tokenizer"`
	TokenizerSHA256 string `json:"tokenizer_sha256"`
	Format          string `json:"format"`
	Field           string `json:"field"`
	// AppendEOS is the token id that ends every document, nil for none.
	AppendEOS *int32 `json:"append_eos"`
}

// same reports whether outputs made with s are what o asks for: the same
// tokenizer table (whatever it was called), format, field and EOS.
func (s Settings) same(o Settings) bool {
	eos := s.AppendEOS == nil && o.AppendEOS == nil ||
		s.AppendEOS != nil && o.AppendEOS != nil && *s.AppendEOS == *o.AppendEOS
	return eos && s.TokenizerSHA256 == o.TokenizerSHA256 && s.Format == o.Format && s.Field == o.Field
}

func (s Settings) String() string {
	sum := s.TokenizerSHA256
	if len(sum) > 12 {
		sum = sum[:12] + "…"
	}
	eos := "no EOS appended"
	if s.AppendEOS != nil {
		eos = fmt.Sprintf("EOS %d appended", *s.AppendEOS)
	}
	return fmt.Sprintf("tokenizer %s (sha256 %s), %s field %q, %s", s.Tokenizer, sum, s.Format, s.Field, eos)
}

// settings are the Settings cfg asks for, with the format's default field.
func (cfg Config) settings() Settings {
	s := Settings{Tokenizer: cfg.Tokenizer, TokenizerSHA256: cfg.TokenizerSHA256, Format: cfg.Format, Field: cfg.Field}
	if s.Field == "" {
		s.Field = files.TextField
	}
	if cfg.AppendEOS {
		eos := cfg.EOS
		s.AppendEOS = &eos
	}
	return s
}

// record is the file <name>.prepare.json: the settings an output was made
// with, and, for people, where it came from and what it holds.
type record struct {
	Version int `json:"version"`
	Settings
	Input             string `json:"input"`
	MadeBy            string `json:"made_by,omitempty"`
	Documents         uint64 `json:"documents"`
	Tokens            uint64 `json:"tokens"`
	BadRecordsSkipped uint64 `json:"bad_records_skipped"`
}

// recordOf is the record of input f's output: docs documents of tokens
// tokens, bad records left out.
func (r *run) recordOf(f source.File, docs int, tokens, bad uint64) record {
	return record{Version: recordVersion, Settings: r.cfg.settings(), Input: f.Path, MadeBy: r.cfg.MadeBy,
		Documents: uint64(docs), Tokens: tokens, BadRecordsSkipped: bad}
}

// action is what a run does with one output.
type action int

const (
	toMake action = iota // not finished: make it
	toSkip               // finished with the settings asked for
	toRedo               // finished with other settings, and Force is set
)

// MismatchError refuses a run into a folder whose finished outputs were made
// with other settings than it asks for.
type MismatchError struct {
	Output string    // the first such output: <output>/<name>.{bin,idx}
	Made   *Settings // what it was made with; nil when it has no readable record
	Why    string    // why there are no settings to show, when Made is nil
	Asked  Settings
	More   int // further outputs like it
}

func (e *MismatchError) Error() string {
	made := "unknown settings (" + e.Why + ")"
	if e.Made != nil {
		made = e.Made.String()
	}
	more := ""
	if e.More > 0 {
		more = fmt.Sprintf(" (and %d more finished files like it)", e.More)
	}
	return fmt.Sprintf("%s was made with %s; this run asks for %s%s; run again with --force to redo such files, or write into an empty folder",
		e.Output, made, e.Asked, more)
}

// plan says what to do with the output at prefix: make it when it has no
// .idx, skip it when its record holds the settings asked for, else redo it
// (force) or return a *MismatchError.
func plan(prefix string, asked Settings, force bool) (action, error) {
	if _, err := os.Stat(prefix + ".idx"); errors.Is(err, fs.ErrNotExist) {
		return toMake, nil
	} else if err != nil {
		return 0, err
	}
	mis := &MismatchError{Output: prefix + ".{bin,idx}", Asked: asked}
	b, err := os.ReadFile(prefix + recordExt)
	var rec record
	switch {
	case errors.Is(err, fs.ErrNotExist):
		mis.Why = "no " + filepath.Base(prefix+recordExt) + " beside it: made by another program or an older dataloaderd"
	case err != nil:
		return 0, err
	default:
		if err := json.Unmarshal(b, &rec); err != nil {
			mis.Why = fmt.Sprintf("%s does not parse: %v", filepath.Base(prefix+recordExt), err)
		} else if rec.Version != recordVersion {
			mis.Why = fmt.Sprintf("%s has version %d, this dataloaderd writes %d", filepath.Base(prefix+recordExt), rec.Version, recordVersion)
		} else if rec.same(asked) {
			return toSkip, nil
		} else {
			mis.Made = &rec.Settings
		}
	}
	if force {
		return toRedo, nil
	}
	return 0, mis
}

// planAll plans every output before any is made, so that a run refused for
// outputs made with other settings has changed nothing.
func planAll(cfg Config, names []string) ([]action, error) {
	asked := cfg.settings()
	actions := make([]action, len(names))
	var first *MismatchError
	for i, n := range names {
		a, err := plan(filepath.Join(cfg.Output, n), asked, cfg.Force)
		var mis *MismatchError
		switch {
		case errors.As(err, &mis) && first == nil:
			first = mis
		case errors.As(err, &mis):
			first.More++
		case err != nil:
			return nil, err
		}
		actions[i] = a
	}
	if first != nil {
		return nil, first
	}
	return actions, nil
}

// writeRecord writes prefix's record atomically (temporary file, fsync,
// rename, fsync of the folder), before the outputs are committed: a .idx in
// place always has its record beside it.
func writeRecord(prefix string, rec record) (err error) {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	path := prefix + recordExt
	f, err := os.Create(path + ".tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(path + ".tmp")
		}
	}()
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(path+".tmp", path)
	}
	if err != nil {
		return fmt.Errorf("record %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}

// unfinish removes prefix.idx, so that the output counts as unfinished
// until it is made again: done before redoing an output in place.
func unfinish(prefix string) error {
	if err := os.Remove(prefix + ".idx"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return syncDir(filepath.Dir(prefix))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
