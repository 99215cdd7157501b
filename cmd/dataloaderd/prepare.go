package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/dataloaderd/dataloaderd/internal/prepare"
	"github.com/dataloaderd/dataloaderd/internal/tokenize"
)

const prepareUsage = `dataloaderd prepare: tokenize raw text into Megatron .bin/.idx datasets.

Usage:
  dataloaderd prepare --input PATH --format jsonl|parquet --tokenizer NAME|PATH --output DIR [flags]

One dataset <output>/<input name>.{bin,idx} per input file, uint16 tokens
when the vocabulary fits, else int32, and beside it <input name>.prepare.json,
the record of what made it: the tokenizer (as named, and the SHA-256 of its
rank file or tokenizer.json), the format, the field and --append-eos.

Outputs are written atomically: run the same command again after an
interruption and the files finished with the same settings are skipped. A run
into a folder holding files made with other settings (or without a record)
is refused before it changes anything; --force redoes those files.

Flags:
`

// prepareCmd runs `dataloaderd prepare`.
func prepareCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("prepare", flag.ContinueOnError)
	input := fs.String("input", "", "text files: a file, a directory or a glob (required)")
	format := fs.String("format", "", "jsonl (plain, .gz, .zst) or parquet (required)")
	field := fs.String("field", "", `JSONL field or Parquet column holding the text (default "text")`)
	onBad := fs.String("on-bad-record", "error", "error: stop at a record that is not a document; skip: count it and go on")
	tok := fs.String("tokenizer", "", "built-in encoding (r50k_base, gpt2, p50k_base, cl100k_base, o200k_base) or a tokenizer.json path (required)")
	var dirs multiFlag
	fs.Var(&dirs, "tokenizer-dir", "directory holding <encoding>.tiktoken rank files (repeatable; then $DATALOADERD_TOKENIZERS)")
	output := fs.String("output", "", "directory of the datasets (required)")
	workers := fs.Int("workers", runtime.NumCPU(), "tokenizing goroutines")
	eos := fs.Int("append-eos", -1, "end every document with this token id (Megatron's --append-eod); dataloaderd adds EOS itself, so it is not needed for it")
	quiet := fs.Bool("quiet", false, "no progress bar")
	force := fs.Bool("force", false, "redo finished files made with another tokenizer, format, field or --append-eos (or without a record) instead of refusing the run")
	if err := parseFlags(fs, prepareUsage, args, stderr); err != nil {
		return err
	}
	var missing []string
	for _, f := range []struct{ name, v string }{{"input", *input}, {"format", *format}, {"tokenizer", *tok}, {"output", *output}} {
		if f.v == "" {
			missing = append(missing, "--"+f.name)
		}
	}
	if len(missing) > 0 || fs.NArg() > 0 {
		fmt.Fprintf(stderr, "prepare: missing %s\n", strings.Join(missing, ", "))
		fs.Usage()
		return errUsage
	}
	if *workers < 1 {
		return fmt.Errorf("prepare: --workers must be at least 1, got %d", *workers)
	}
	enc, id, err := tokenize.Load(*tok, dirs...)
	if err != nil {
		return fmt.Errorf("prepare: tokenizer %q: %w", *tok, err)
	}
	maxID := int32(enc.VocabSize() - 1)
	for _, name := range enc.SpecialTokens() {
		if v, ok := enc.SpecialToken(name); ok && v > maxID {
			maxID = v
		}
	}
	if *eos >= 0 {
		maxID = max(maxID, int32(*eos))
	}
	cfg := prepare.Config{
		Input: *input, Format: *format, Field: *field, OnBadRecord: *onBad, Encoder: enc, MaxID: maxID,
		Tokenizer: *tok, TokenizerSHA256: enc.SHA256(), AppendEOS: *eos >= 0, EOS: int32(*eos),
		Output: *output, Workers: *workers, Force: *force, MadeBy: "dataloaderd " + versionString(),
	}
	bar := newProgressBar(stderr, !*quiet && isTerminal(stderr))
	cfg.Progress = bar.update
	fmt.Fprintf(stderr, "prepare: %s (%s) -> %s, tokenizer %s, %d workers\n", *input, *format, *output, id, *workers)
	st, err := prepare.Run(ctx, cfg)
	bar.finish()
	fmt.Fprintf(stdout, "files: %d written, %d already done (skipped), %d in all\n", st.FilesDone, st.FilesSkipped, st.Files)
	if st.FilesRedone > 0 {
		fmt.Fprintf(stdout, "redone (--force): %d of the files written had been made with other settings\n", st.FilesRedone)
	}
	fmt.Fprintf(stdout, "documents: %d, tokens: %d, input bytes: %d, bad records skipped: %d\n",
		st.Documents, st.Tokens, st.BytesDone, st.BadRecords)
	fmt.Fprintf(stdout, "time: %.1f s, %.0f tokens/s\n", st.Elapsed.Seconds(), st.TokensPerSecond())
	if err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	return nil
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressBar draws one line on a terminal, rewritten in place; elsewhere
// (a log file) it prints nothing until the final summary.
type progressBar struct {
	w    io.Writer
	draw bool
}

func newProgressBar(w io.Writer, draw bool) *progressBar { return &progressBar{w: w, draw: draw} }

func (b *progressBar) update(s prepare.Stats) {
	if !b.draw {
		return
	}
	frac := 0.0
	if s.Bytes > 0 {
		frac = float64(s.BytesDone) / float64(s.Bytes)
	}
	const width = 30
	filled := int(frac * width)
	fmt.Fprintf(b.w, "\r[%s%s] %5.1f%% %d/%d files, %d docs, %d tokens, %.1fM tokens/s ",
		strings.Repeat("#", filled), strings.Repeat(".", width-filled), 100*frac,
		s.FilesDone+s.FilesSkipped, s.Files, s.Documents, s.Tokens, s.TokensPerSecond()/1e6)
}

func (b *progressBar) finish() {
	if b.draw {
		fmt.Fprintln(b.w)
	}
}
