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

// TestInspectBlocklists: inspect shows a state's blocklist log (a list put
// in effect after step 20, another after step 35, then none after step
// 50), in its table and in --json.
func TestInspectBlocklists(t *testing.T) {
	dir := t.TempDir()
	roots, err := files.NewRoots(nil)
	if err != nil {
		t.Fatal(err)
	}
	folder, err := roots.Folder("test", dir)
	if err != nil {
		t.Fatal(err)
	}
	fp := state.Fingerprint{SeqLen: 16, LogicalShards: 1, EOS: 0, BOS: -1, ShuffleWindow: 8,
		Datasets: []state.DatasetPrint{{Name: "web", Format: "megatron", Files: 1, Bytes: 100, Units: 10}}}
	log := []state.Blocklist{{Fingerprint: "00112233aabbccdd", Entries: 3, Step: 20},
		{Fingerprint: "0123456789abcdef", Entries: 5, Step: 35}, {Step: 50}}
	st := state.Rank{DPRank: 0, DPSize: 1, Step: 57, Blocklists: log, Shards: map[state.ShardID]state.Shard{{Dataset: 0, Shard: 0}: {Lines: 9}}}
	if _, _, err := state.Save(folder, fp, st); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"inspect", dir}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"blocklists (3, the last in effect):", "from step 21: blocklist 00112233aabbccdd, 3 document(s)",
		"from step 36: blocklist 0123456789abcdef, 5 document(s)", "from step 51: none (the resume gave no blocklist)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("inspect printed no %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := run(context.Background(), []string{"inspect", "--json", dir}, &out, &errb); code != 0 {
		t.Fatalf("--json: exit %d: %s", code, errb.String())
	}
	var got inspection
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || !reflect.DeepEqual(got.Blocklists, log) {
		t.Fatalf("--json blocklists %+v (%v), want %+v", got.Blocklists, err, log)
	}
}
