package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/state"
)

const inspectUsage = `dataloaderd inspect: show what a checkpoint's loader state holds.

Usage:
  dataloaderd inspect [--json] CHECKPOINT

CHECKPOINT is a folder holding dataloader/rank-*-of-*.json (what
loader.save(folder) writes). Prints the fingerprint, the saved world and
step, each dataset's lines served and epochs, and the mixture history (the
weights or schedule in effect from each step on) with the changes queued
for later steps. Reads the files only; no daemon is needed.

Flags:
`

// inspection is what inspect reports, also its --json form.
type inspection struct {
	Folder      string            `json:"folder"`
	Step        uint64            `json:"step"`
	DPSize      uint32            `json:"dp_size"`
	Fingerprint state.Fingerprint `json:"fingerprint"`
	Datasets    []datasetSummary  `json:"datasets"`
	// Mixture is the history, the last entry in effect; Queued the changes
	// of weights waiting for batches after Step.
	Mixture []state.MixChange `json:"mixture"`
	Queued  []state.MixChange `json:"queued"`
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

func inspectCmd(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parseFlags(fs, inspectUsage, args, stderr); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fmt.Fprint(stderr, "dataloaderd inspect: name one checkpoint folder\n\n", inspectUsage)
		return errUsage
	}
	in, err := inspect(fs.Arg(0))
	if err != nil {
		return escapedError{err} // its text may hold what the files hold
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(in)
	}
	printInspection(stdout, in)
	return nil
}

// inspect reads and merges the rank files of a checkpoint folder.
func inspect(folder string) (inspection, error) {
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
	queued := state.Queued(merged.Mixture, merged.Step)
	in := inspection{Folder: folder, Step: merged.Step, DPSize: merged.FromSize, Fingerprint: fp,
		Mixture: merged.Mixture[:len(merged.Mixture)-len(queued)], Queued: append([]state.MixChange{}, queued...)}
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
	return in, nil
}

func printInspection(w io.Writer, in inspection) {
	fp := in.Fingerprint
	fmt.Fprintf(w, "checkpoint %s\n", shown(in.Folder)) // names from the files are shown(): no escape sequences
	fmt.Fprintf(w, "saved after step %d by %d rank(s)\n", in.Step, in.DPSize)
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
