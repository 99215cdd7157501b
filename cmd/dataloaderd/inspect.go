package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/dataloaderd/dataloaderd/internal/dcp"
	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/state"
)

const inspectUsage = `dataloaderd inspect: show what a checkpoint's loader state holds.

Usage:
  dataloaderd inspect [--json] [--shards] [--prefix KEY] CHECKPOINT

CHECKPOINT is a folder holding dataloader/rank-*-of-*.json (what
loader.save(folder) writes), or a torch.distributed.checkpoint folder
(its .metadata and *.distcp files) into which dcp.save wrote a Loader's
state dict under any key (the README's trainer: {"dataloader": loader}).
Prints the fingerprint, the saved world and step, each dataset's lines
served and epochs, and the mixture history (the weights or schedule in
effect from each step on) with the changes queued for later steps, the
ranges of steps skipped or pending (skip_steps); with
--shards, each shard's cursor (--json always has them). Reads the files
only; no daemon and no Python are needed.

Flags:
`

// The forms of checkpoint inspect reads.
const (
	formRankFiles = "rank files"
	formDCP       = "torch.distributed.checkpoint"
)

// inspection is what inspect reports, also its --json form.
type inspection struct {
	Folder string `json:"folder"`
	// Form is how the checkpoint holds the state (formRankFiles, formDCP);
	// Prefix, for DCP, the key of the state dict it is under.
	Form   string `json:"form"`
	Prefix string `json:"prefix,omitempty"`
	// Fresh says the state was saved before its first batch: no run part,
	// so no fingerprint, step or mixture; only its (zero) cursors.
	Fresh bool   `json:"fresh,omitempty"`
	Step  uint64 `json:"step"`
	// DPSize is the saved world's dp_size; 0 when a DCP state does not say.
	DPSize      uint32            `json:"dp_size"`
	Fingerprint state.Fingerprint `json:"fingerprint"`
	Datasets    []datasetSummary  `json:"datasets"`
	// Mixture is the history, the last entry in effect; Queued the changes
	// of weights waiting for batches after Step.
	Mixture []state.MixChange `json:"mixture"`
	Queued  []state.MixChange `json:"queued"`
	// Skips are the ranges of steps the state logs as skipped: passed
	// ("skipped") or ahead of its step ("pending").
	Skips []skipSummary `json:"skips,omitempty"`
	// Blocklists is the blocklist log, the last in effect.
	Blocklists []state.Blocklist `json:"blocklists,omitempty"`
	// Shards is every shard's cursor.
	Shards []shardCursor `json:"shards"`
}

// datasetSummary is one dataset's part of a saved world.
type datasetSummary struct {
	Name string `json:"name"`
	// Lines served from its shards over the whole run.
	Lines uint64 `json:"lines"`
	// MinEpoch and MaxEpoch are its shards' current epochs (the shard
	// furthest behind and ahead).
	MinEpoch uint64 `json:"min_epoch"`
	MaxEpoch uint64 `json:"max_epoch"`
	Shards   int    `json:"shards"`
}

// shardCursor is one shard's cursor (state.Shard), named as the wire's
// ShardState names its fields.
type shardCursor struct {
	Dataset string `json:"dataset"`
	Index   int    `json:"dataset_index"`
	Shard   uint32 `json:"shard"`
	Lines   uint64 `json:"lines"`
	Epoch   uint64 `json:"epoch"`
	Pos     uint64 `json:"pos"`
	Offset  uint64 `json:"offset"`
	Taken   uint64 `json:"taken"`
	Base    uint64 `json:"base"`
}

func inspectCmd(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	withShards := fs.Bool("shards", false, "print each shard's cursor")
	prefix := fs.String("prefix", "", "in a torch.distributed.checkpoint folder, the key the loader's state is under (default: the only one)")
	if err := parseFlags(fs, inspectUsage, args, stderr); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fmt.Fprint(stderr, "dataloaderd inspect: name one checkpoint folder\n\n", inspectUsage)
		return errUsage
	}
	in, err := inspect(fs.Arg(0), *prefix)
	if err != nil {
		return escapedError{err} // its text may hold what the files hold
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(in)
	}
	printInspection(stdout, in)
	if *withShards {
		printShards(stdout, in.Shards)
	}
	return nil
}

// inspect reads a checkpoint folder: its rank files if it has a
// dataloader/ directory, else, if it is a DCP checkpoint, the loader's
// state under prefix in it.
func inspect(folder, prefix string) (inspection, error) {
	_, err := os.Stat(filepath.Join(folder, state.Dir))
	if errors.Is(err, os.ErrNotExist) {
		isDCP, derr := dcp.IsCheckpoint(folder)
		if derr != nil {
			return inspection{}, fmt.Errorf("checkpoint %s: %w", folder, derr)
		}
		if !isDCP {
			return inspection{}, fmt.Errorf("checkpoint %s has no %s/ directory of rank files (loader.save) and no %s (torch.distributed.checkpoint)",
				folder, state.Dir, dcp.MetadataFile)
		}
		return inspectDCP(folder, prefix)
	}
	if prefix != "" {
		return inspection{}, fmt.Errorf("checkpoint %s holds rank files (%s/): --prefix names a key of a torch.distributed.checkpoint", folder, state.Dir)
	}
	return inspectRankFiles(folder)
}

// inspectRankFiles reads and merges the rank files of a checkpoint folder.
func inspectRankFiles(folder string) (inspection, error) {
	roots, err := files.NewRoots(nil)
	if err != nil {
		return inspection{}, err
	}
	f, err := roots.Folder("checkpoint", folder)
	if err != nil {
		return inspection{}, err
	}
	blobs, names, err := state.ReadFolder(f)
	if err != nil {
		return inspection{}, err
	}
	fp, _, err := state.Decode(names[0], blobs[0])
	if err != nil {
		return inspection{}, err
	}
	merged, err := state.Merge(fp, names, blobs)
	if err != nil {
		return inspection{}, err
	}
	return summarize(inspection{Folder: folder, Form: formRankFiles}, fp, merged), nil
}

// skipSummary is one range of a state's skip log.
type skipSummary struct {
	First  uint64 `json:"first"`
	Last   uint64 `json:"last"`
	Steps  uint64 `json:"steps"`
	Status string `json:"status"`
}

// skipsOf describes a state's skip log at step.
func skipsOf(skips []state.SkipRange, step uint64) []skipSummary {
	var out []skipSummary
	for _, s := range skips {
		status := "skipped"
		if s.Last > step {
			status = "pending"
		}
		out = append(out, skipSummary{First: s.First, Last: s.Last, Steps: s.Steps(), Status: status})
	}
	return out
}

// summarize fills in a report of a saved world's state, its shards'
// cursors whole.
func summarize(in inspection, fp state.Fingerprint, merged *state.Restored) inspection {
	queued := state.Queued(merged.Mixture, merged.Step)
	in.Step, in.DPSize, in.Fingerprint = merged.Step, merged.FromSize, fp
	in.Mixture = merged.Mixture[:len(merged.Mixture)-len(queued)]
	in.Queued = append([]state.MixChange{}, queued...)
	in.Blocklists = merged.Blocklists
	in.Shards = shardsOf(fp, merged.Shards)
	in.Skips = skipsOf(merged.Skips, merged.Step)
	for d, ds := range fp.Datasets {
		sum := datasetSummary{Name: ds.Name, MinEpoch: ^uint64(0)}
		for id, sh := range merged.Shards {
			if id.Dataset != d {
				continue
			}
			sum.Shards++
			sum.Lines += sh.Lines
			sum.MinEpoch = min(sum.MinEpoch, sh.Window.Epoch)
			sum.MaxEpoch = max(sum.MaxEpoch, sh.Window.Epoch)
		}
		if sum.Shards == 0 {
			sum.MinEpoch = 0
		}
		in.Datasets = append(in.Datasets, sum)
	}
	return in
}

func printInspection(w io.Writer, in inspection) {
	fp := in.Fingerprint
	fmt.Fprintf(w, "checkpoint %s\n", shown(in.Folder)) // names from the files are shown(): no escape sequences
	if in.Form == formDCP {
		fmt.Fprintf(w, "%s, the loader's state under %q\n", in.Form, shown(in.Prefix))
	}
	switch {
	case in.Fresh:
		fmt.Fprintf(w, "saved before its first batch: no step, fingerprint or mixture; %d shard cursor(s)\n", len(in.Shards))
		return
	case in.DPSize == 0:
		fmt.Fprintf(w, "saved after step %d (the state does not say by how many ranks)\n", in.Step)
	default:
		fmt.Fprintf(w, "saved after step %d by %d rank(s)\n", in.Step, in.DPSize)
	}
	bos := "none"
	if fp.BOS >= 0 {
		bos = fmt.Sprint(fp.BOS)
	}
	fmt.Fprintf(w, "fingerprint: seq_len %d, logical_shards %d, seed %d, eos_id %d, bos_id %s, shuffle_window %d\n\n",
		fp.SeqLen, fp.LogicalShards, fp.Seed, fp.EOS, bos, fp.ShuffleWindow)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "dataset\tformat\tfiles\tbytes\tunits\tlines served\tepoch (min-max)")
	var total uint64
	for i, ds := range in.Datasets {
		p := fp.Datasets[i]
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d-%d\n", shown(ds.Name), shown(p.Format), p.Files, p.Bytes, p.Units, ds.Lines, ds.MinEpoch, ds.MaxEpoch)
		total += ds.Lines
	}
	tw.Flush()
	if total > 0 {
		var shares []string
		for _, ds := range in.Datasets {
			shares = append(shares, fmt.Sprintf("%s %.1f%%", shown(ds.Name), 100*float64(ds.Lines)/float64(total)))
		}
		fmt.Fprintf(w, "realized mixture: %s\n", strings.Join(shares, ", "))
	}
	fmt.Fprintf(w, "\nmixture history (%d change(s)):\n", len(in.Mixture))
	names := make([]string, len(fp.Datasets))
	for i, d := range fp.Datasets {
		names[i] = d.Name
	}
	printMixture(w, names, in.Mixture)
	if len(in.Queued) > 0 {
		fmt.Fprintf(w, "\nqueued changes (%d, set_weights for later steps):\n", len(in.Queued))
		printMixture(w, names, in.Queued)
	}
	printSkips(w, in.Skips)
	printBlocklists(w, in.Blocklists)
}

// printSkips writes the skip log, one range a line.
func printSkips(w io.Writer, skips []skipSummary) {
	if len(skips) == 0 {
		return
	}
	fmt.Fprintf(w, "\nskipped steps (%d range(s), skip_steps: made and dropped, never served):\n", len(skips))
	for _, s := range skips {
		fmt.Fprintf(w, "  steps %d to %d (%d steps): %s\n", s.First, s.Last, s.Steps, s.Status)
	}
}

// printBlocklists writes the blocklist log, one record a line.
func printBlocklists(w io.Writer, log []state.Blocklist) {
	if len(log) == 0 {
		return
	}
	fmt.Fprintf(w, "\nblocklists (%d, the last in effect):\n", len(log))
	for _, b := range log {
		if b.Fingerprint == "" {
			fmt.Fprintf(w, "  from step %d: none (the resume gave no blocklist)\n", b.Step+1)
			continue
		}
		fmt.Fprintf(w, "  from step %d: blocklist %s, %d document(s)\n", b.Step+1, b.Fingerprint, b.Entries)
	}
}

// printMixture writes the entries of a mixture log, one a line.
func printMixture(w io.Writer, names []string, m []state.MixChange) {
	for _, mc := range m {
		if len(mc.Schedule) == 0 {
			fmt.Fprintf(w, "  from step %d: weights %s\n", mc.Step+1, weightsText(names, mc.Weights))
			continue
		}
		fmt.Fprintf(w, "  from step %d: schedule\n", mc.Step+1)
		for _, p := range mc.Schedule {
			how := "from"
			if p.Linear {
				how = "ramp to, at"
			}
			fmt.Fprintf(w, "    %s step %d: %s\n", how, p.Step, weightsText(names, p.Weights))
		}
	}
}

// weightsText writes weights as name=weight, in dataset order.
func weightsText(names []string, ws []float64) string {
	parts := make([]string, 0, len(ws))
	for i, x := range ws {
		name := fmt.Sprint(i)
		if i < len(names) {
			name = shown(names[i])
		}
		parts = append(parts, fmt.Sprintf("%s=%g", name, x))
	}
	return strings.Join(slices.Clip(parts), " ")
}

// printShards writes each shard's cursor, one a line.
func printShards(w io.Writer, shards []shardCursor) {
	fmt.Fprintf(w, "\nshards (%d):\n", len(shards))
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  dataset\tshard\tlines\tepoch\tpos\toffset\ttaken\tbase")
	for _, c := range shards {
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", shown(c.Dataset), c.Shard, c.Lines, c.Epoch, c.Pos, c.Offset, c.Taken, c.Base)
	}
	tw.Flush()
}
