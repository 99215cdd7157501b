package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/dataloaderd/dataloaderd/internal/stream"
)

const explainUsage = `dataloaderd explain: show which documents made a training step's batches.

Usage:
  dataloaderd explain --ranks W (--step N | --steps A-B) [--rank R] [--from CHECKPOINT [--prefix KEY]] [--json] CONFIG
  dataloaderd explain --batch-id ID [--from CHECKPOINT [--prefix KEY]] [--json] CONFIG

CONFIG is the job config in JSON, as the Python client reads it; W the
job's dp_size at that step. For each rank (or --rank R) and each line of
step N (steps count from 1, as batch["step"]) it prints every piece of the
line: its columns, dataset, file, document (for units of several documents,
flat token files and text, the unit and the document's index in it), the
span of the document's tokens it took, and whether it holds the BOS or EOS
that frame the document. --batch-id takes a batch's batch_id (the Python
client's batch["batch_id"]), whose job fingerprint must be the config's,
and explains that rank's step.

With --from, each rank starts from the checkpoint folder's rank files
(dataloader/rank-*-of-*.json, what loader.save writes; a world of any size),
or from the loader's state in a torch.distributed.checkpoint folder (under
--prefix KEY, default the only one), exactly as a session resuming from it
would; without, from the run's start.
It then moves to the step without copying a token: for pre-tokenized data
with epochs 0 by counting lines (seconds for a million steps), otherwise
batch by batch, reading every document's length (text: tokenizing it).
Weights changed with set_weights after the checkpoint are not known to it:
explain from the checkpoint saved after the change. No daemon is needed.

Flags:
`

// explainRequest is what explain is asked.
type explainRequest struct {
	config     string
	from       string
	prefix     string // the loader's key in a DCP checkpoint
	first      uint64 // the steps to explain, first to last
	last       uint64
	rank       int // -1: every rank
	ranks      uint32
	batchFP    string // a batch id's job fingerprint, checked against the config's
	tokenizers []string
}

// stringList is a flag given any number of times.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func explainCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	from := fs.String("from", "", "checkpoint folder to start from (its dataloader/ rank files, or a torch.distributed.checkpoint); default: the run's start")
	prefix := fs.String("prefix", "", "in a torch.distributed.checkpoint folder, the key the loader's state is under (default: the only one)")
	step := fs.Uint64("step", 0, "the step to explain (from 1)")
	steps := fs.String("steps", "", "the steps to explain, A-B (inclusive)")
	batchID := fs.String("batch-id", "", "a batch's batch_id: its job fingerprint, step and rank")
	rank := fs.Int("rank", -1, "explain this dp_rank only (default: every rank)")
	ranks := fs.Uint("ranks", 0, "the job's dp_size (required without --batch-id)")
	asJSON := fs.Bool("json", false, "print the pieces as JSON")
	var tokenizers stringList
	fs.Var(&tokenizers, "tokenizer-dir", "a folder of tokenizer files, as the daemon's flag (may be repeated)")
	if err := parseFlags(fs, explainUsage, args, stderr); err != nil {
		return err
	}
	req := explainRequest{from: *from, prefix: *prefix, rank: *rank, ranks: uint32(*ranks), tokenizers: tokenizers}
	if err := req.parse(fs, *step, *steps, *batchID, *ranks); err != nil {
		fmt.Fprintf(stderr, "dataloaderd explain: %v\n\n%s", err, explainUsage)
		return errUsage
	}
	rep, err := explain(ctx, req)
	if err != nil {
		return escapedError{err}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printExplained(stdout, rep)
	return nil
}

// parse checks the flags and arguments into req.
func (req *explainRequest) parse(fs *flag.FlagSet, step uint64, steps, batchID string, ranks uint) error {
	if fs.NArg() != 1 {
		return fmt.Errorf("name one config file")
	}
	req.config = fs.Arg(0)
	given := 0
	for _, g := range []bool{step != 0, steps != "", batchID != ""} {
		if g {
			given++
		}
	}
	if given != 1 {
		return fmt.Errorf("give one of --step, --steps and --batch-id")
	}
	if ranks > 1<<20 || req.rank < -1 {
		return fmt.Errorf("--ranks %d or --rank %d is out of range", ranks, req.rank)
	}
	switch {
	case batchID != "":
		fp, s, r, w, err := stream.ParseBatchID(batchID)
		if err != nil {
			return err
		}
		if (ranks != 0 && uint32(ranks) != w) || (req.rank >= 0 && uint32(req.rank) != r) {
			return fmt.Errorf("--batch-id %s is of rank %d of %d: --rank and --ranks, when given, must say the same", batchID, r, w)
		}
		req.batchFP, req.first, req.last, req.rank, req.ranks = fp, s, s, int(r), w
		return nil
	case steps != "":
		a, b, ok := strings.Cut(steps, "-")
		first, ferr := strconv.ParseUint(a, 10, 64)
		last, lerr := strconv.ParseUint(b, 10, 64)
		if !ok || ferr != nil || lerr != nil || first == 0 || last < first {
			return fmt.Errorf("--steps %q: want A-B, 1 <= A <= B", steps)
		}
		req.first, req.last = first, last
	default:
		req.first, req.last = step, step
	}
	if ranks == 0 {
		return fmt.Errorf("--ranks (the job's dp_size) is required")
	}
	if req.rank >= int(ranks) {
		return fmt.Errorf("--rank %d is not below --ranks %d", req.rank, ranks)
	}
	return nil
}
