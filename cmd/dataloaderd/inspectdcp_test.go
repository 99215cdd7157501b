package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The DCP checkpoints internal/dcp/testdata/make_checkpoints.py wrote with
// torch: the Loader's state dict under "dataloader" from two ranks beside a
// trainer's, under "state.train_loader" from one, and none.
const (
	dcpLoader = "../../internal/dcp/testdata/loader"
	dcpNested = "../../internal/dcp/testdata/nested"
	dcpNone   = "../../internal/dcp/testdata/none"
)

// inspectRun runs dataloaderd inspect and returns its exit code and output.
func inspectRun(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"inspect"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// TestInspectDCP: inspect reads the loader's state from a DCP checkpoint
// two ranks wrote, as it reads rank files: the step and world, the
// fingerprint, each dataset's lines and epochs, the mixture history and
// queue, and (--shards, --json) every shard's cursor, each field from its
// place in the cursor (the fixture's values differ field by field).
func TestInspectDCP(t *testing.T) {
	code, out, errs := inspectRun(t, "--shards", dcpLoader)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{`torch.distributed.checkpoint, the loader's state under "dataloader"`,
		"saved after step 57 by 2 rank(s)", "seq_len 128, logical_shards 4, seed 9",
		"web      megatron  1      100    10     88            0-0", "code     tokens    2      50     4      488           1-1",
		"from step 1: weights web=3 code=1", "from step 41: schedule", "ramp to, at step 100: web=0 code=1",
		"queued changes (1, set_weights for later steps):\n  from step 61: weights web=0 code=1",
		"shards (8):", "dataset  shard  lines  epoch  pos   offset  taken  base", "code     3      137    1      1003  2001    0      5"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect printed no %q:\n%s", want, out)
		}
	}
	code, out, errs = inspectRun(t, "--json", dcpLoader)
	if code != 0 {
		t.Fatalf("--json: exit %d: %s", code, errs)
	}
	var got inspection
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if got.Form != formDCP || got.Prefix != "dataloader" || got.Step != 57 || got.DPSize != 2 || got.Fingerprint.LogicalShards != 4 ||
		len(got.Datasets) != 2 || got.Datasets[1].Lines != 488 || len(got.Mixture) != 2 || len(got.Queued) != 1 || len(got.Shards) != 8 {
		t.Fatalf("--json: %+v", got)
	}
	for i, c := range got.Shards {
		d, s := uint64(i/4), uint64(i%4)
		want := shardCursor{Dataset: []string{"web", "code"}[d], Index: int(d), Shard: uint32(s),
			Lines: 100*d + 10*s + 7, Epoch: d, Pos: 1000 + s, Offset: 2000 + d, Taken: s % 3, Base: 5}
		if c != want {
			t.Errorf("shard %d: %+v, want %+v", i, c, want)
		}
	}
}

// TestInspectDCPPrefix: the state is found under any key, nested or not;
// --prefix names one, and a prefix the checkpoint lacks, or --prefix for
// rank files, is refused naming what there is.
func TestInspectDCPPrefix(t *testing.T) {
	code, out, errs := inspectRun(t, dcpNested)
	if code != 0 || !strings.Contains(out, `the loader's state under "state.train_loader"`) || !strings.Contains(out, "saved after step 12 by 1 rank(s)") {
		t.Fatalf("exit %d: %s%s", code, out, errs)
	}
	if code, _, errs := inspectRun(t, "--prefix", "state.train_loader", dcpNested); code != 0 {
		t.Fatalf("--prefix state.train_loader: exit %d: %s", code, errs)
	}
	code, _, errs = inspectRun(t, "--prefix", "dataloader", dcpNested)
	if code != 1 || !strings.Contains(errs, `holds no loader's state under "dataloader"`) || !strings.Contains(errs, `states it holds: "state.train_loader"`) {
		t.Fatalf("--prefix of another key: exit %d, %q", code, errs)
	}
	ranks := t.TempDir()
	if err := os.Mkdir(filepath.Join(ranks, "dataloader"), 0o755); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := inspectRun(t, "--prefix", "dataloader", ranks); code != 1 || !strings.Contains(errs, "holds rank files (dataloader/): --prefix names a key of a torch.distributed.checkpoint") {
		t.Fatalf("--prefix for rank files: exit %d, %q", code, errs)
	}
}

// TestInspectDCPNone: a DCP checkpoint without a loader's state says so,
// naming the folder, and exits 1.
func TestInspectDCPNone(t *testing.T) {
	code, _, errs := inspectRun(t, dcpNone)
	if code != 1 || !strings.Contains(errs, "checkpoint "+dcpNone+" (torch.distributed.checkpoint, 5 entries) holds no dataloaderd loader's state") {
		t.Fatalf("exit %d, %q", code, errs)
	}
}
