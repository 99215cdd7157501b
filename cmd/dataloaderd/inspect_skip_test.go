package main

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/state"
)

// TestInspectSkips: inspect lists the ranges a checkpoint's rank files
// log as skipped, passed or pending at the saved step, in its table and
// its --json; rank files whose logs conflict are refused, naming both
// ranges and both files.
func TestInspectSkips(t *testing.T) {
	fp := state.Fingerprint{SeqLen: 8, LogicalShards: 2, EOS: 0, BOS: -1, ShuffleWindow: 8,
		Datasets: []state.DatasetPrint{{Name: "web", Format: "megatron", Files: 1, Bytes: 100, Units: 10}}}
	save := func(skips ...[]state.SkipRange) string {
		dir := t.TempDir()
		roots, _ := files.NewRoots(nil)
		folder, err := roots.Folder("test", dir)
		if err != nil {
			t.Fatal(err)
		}
		for r := uint32(0); r < 2; r++ {
			st := state.Rank{DPRank: r, DPSize: 2, Step: 57, Skips: skips[r],
				Mixture: []state.MixChange{{Weights: []float64{1}}},
				Shards:  map[state.ShardID]state.Shard{{Dataset: 0, Shard: r}: {Lines: 9}}}
			if _, _, err := state.Save(folder, fp, st); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	log := []state.SkipRange{{First: 41, Last: 50}, {First: 60, Last: 61}}
	dir := save(log, log)
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"inspect", dir}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"skipped steps (2 range(s)", "steps 41 to 50 (10 steps): skipped", "steps 60 to 61 (2 steps): pending"} {
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
	want := []skipSummary{{First: 41, Last: 50, Steps: 10, Status: "skipped"}, {First: 60, Last: 61, Steps: 2, Status: "pending"}}
	if !reflect.DeepEqual(got.Skips, want) {
		t.Fatalf("--json skips %+v, want %+v", got.Skips, want)
	}
	errb.Reset()
	conflict := save(log, []state.SkipRange{{First: 41, Last: 55}})
	if code := run(context.Background(), []string{"inspect", conflict}, &out, &errb); code == 0 ||
		!strings.Contains(errb.String(), "rank-0-of-2.json skips steps 41 to 50") || !strings.Contains(errb.String(), "rank-1-of-2.json skips steps 41 to 55") {
		t.Fatalf("conflicting logs: exit %d: %s", code, errb.String())
	}
}
