package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/state"
)

// TestInspect: dataloaderd inspect reads a checkpoint's rank files (two
// ranks, a schedule after a weight change) and reports the step, each
// dataset's lines and epochs, and the mixture history; --json has the same.
func TestInspect(t *testing.T) {
	dir := t.TempDir()
	roots, err := files.NewRoots(nil)
	if err != nil {
		t.Fatal(err)
	}
	folder, err := roots.Folder("test", dir)
	if err != nil {
		t.Fatal(err)
	}
	fp := state.Fingerprint{SeqLen: 128, LogicalShards: 2, Seed: 9, EOS: 0, BOS: -1, ShuffleWindow: 8,
		Datasets: []state.DatasetPrint{{Name: "web", Format: "megatron", Files: 1, Bytes: 100, Units: 10},
			{Name: "code", Format: "tokens", Files: 2, Bytes: 50, Units: 4}}}
	mixture := []state.MixChange{{Step: 0, Weights: []float64{3, 1}},
		{Step: 40, Weights: []float64{1, 1}, Schedule: []state.SchedulePoint{
			{Step: 0, Weights: []float64{1, 1}}, {Step: 100, Weights: []float64{0, 1}, Linear: true}}}}
	for r := uint32(0); r < 2; r++ {
		st := state.Rank{DPRank: r, DPSize: 2, Step: 57, Mixture: mixture, Shards: map[state.ShardID]state.Shard{
			{Dataset: 0, Shard: r}: {Lines: 30 + uint64(r), Window: state.Cursor{Epoch: uint64(r)}},
			{Dataset: 1, Shard: r}: {Lines: 10, Window: state.Cursor{Epoch: 2}},
		}}
		if _, _, err := state.Save(folder, fp, st); err != nil {
			t.Fatal(err)
		}
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"inspect", dir}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"saved after step 57 by 2 rank(s)", "seq_len 128, logical_shards 2, seed 9",
		"web", "61", "0-1", "code", "20", "2-2", "realized mixture: web 75.3%, code 24.7%",
		"from step 1: weights web=3 code=1", "from step 41: schedule", "from step 0: web=1 code=1",
		"ramp to, at step 100: web=0 code=1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("inspect printed no %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := run(context.Background(), []string{"inspect", "--json", dir}, &out, &errb); code != 0 {
		t.Fatalf("--json: exit %d: %s", code, errb.String())
	}
	var got inspection
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Step != 57 || got.DPSize != 2 || got.Datasets[0].Lines != 61 || got.Datasets[1].MaxEpoch != 2 ||
		len(got.Mixture) != 2 || len(got.Mixture[1].Schedule) != 2 {
		t.Fatalf("--json: %+v", got)
	}
	// A folder without rank files says so, and exits 1.
	errb.Reset()
	if code := run(context.Background(), []string{"inspect", t.TempDir()}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "no dataloader/ directory of rank files") {
		t.Fatalf("a folder without state: exit %d, %q", code, errb.String())
	}
}

// TestInspectQueued: a checkpoint saved while a change of weights waited for
// a later step shows it apart from the history, in text and in --json.
func TestInspectQueued(t *testing.T) {
	dir := t.TempDir()
	roots, err := files.NewRoots(nil)
	if err != nil {
		t.Fatal(err)
	}
	folder, err := roots.Folder("test", dir)
	if err != nil {
		t.Fatal(err)
	}
	fp := state.Fingerprint{SeqLen: 128, LogicalShards: 1, Seed: 9, EOS: 0, BOS: -1, ShuffleWindow: 8,
		Datasets: []state.DatasetPrint{{Name: "web", Format: "megatron", Files: 1, Bytes: 100, Units: 10},
			{Name: "code", Format: "tokens", Files: 2, Bytes: 50, Units: 4}}}
	st := state.Rank{DPRank: 0, DPSize: 1, Step: 15, Shards: map[state.ShardID]state.Shard{{Dataset: 0}: {}, {Dataset: 1}: {}},
		Mixture: []state.MixChange{{Step: 0, Weights: []float64{3, 1}}, {Step: 20, Weights: []float64{0, 1}, Runtime: true}}}
	if _, _, err := state.Save(folder, fp, st); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"inspect", dir}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "mixture history (1 change(s)):\n  from step 1: weights web=3 code=1\n\nqueued changes (1, set_weights for later steps):\n  from step 21: weights web=0 code=1\n") {
		t.Errorf("inspect printed:\n%s", out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"inspect", "--json", dir}, &out, &errb); code != 0 {
		t.Fatalf("--json: exit %d: %s", code, errb.String())
	}
	var got inspection
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Mixture) != 1 || len(got.Queued) != 1 || got.Queued[0].Step != 20 {
		t.Fatalf("--json: mixture %+v, queued %+v", got.Mixture, got.Queued)
	}
}
