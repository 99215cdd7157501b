package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// TestPlan: plan opens a config's datasets and prints the working set of
// the node's ranks: two windows of each shard they own and the index, each
// window its tokens' bytes and a block beside each document it reads; it
// exits 1, naming the flag, when that is past --object-cache-mb.
func TestPlan(t *testing.T) {
	dir := t.TempDir()
	// 4096 documents of 100 int32 tokens, 1024 a shard.
	docs := make([][]int32, 4096)
	for i := range docs {
		docs[i] = make([]int32, 100)
		for j := range docs[i] {
			docs[i][j] = int32(1 + i)
		}
	}
	testcorpus.Megatron(t, dir, "corpus", docs)
	idx, err := os.Stat(filepath.Join(dir, "corpus.idx"))
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "job.json")
	// A line of 100 tokens, a window of 2 lines: 200 tokens, 3 units (2 and
	// the one it starts in) of a shard's 1024.
	job := `{"seq_len": 99, "batch_size": 2, "eos_id": 0, "logical_shards": 4, "shuffle_window": 2,
		"datasets": [{"name": "meg", "path": "corpus", "format": "megatron"}]}`
	if err := os.WriteFile(config, []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"plan", "--ranks", "1", "--world", "2", "--object-block-kb", "4", "--json", config}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rep planReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	// Rank 0 of 2 owns 2 shards; a window is 200 tokens of 4 bytes and a
	// 4 KiB block beside each of its 3 units; ahead of it, the 64 units a
	// shard asks for (1024 over 2 shards, at most 64), each with a block.
	d := rep.Datasets[0]
	window := int64(200*4) + 3*4096
	ahead := int64(64*100*4) + 64*4096
	want := idx.Size() + 2*(window+ahead)
	if d.Shards != 2 || d.WindowBytes != window || d.IndexBytes != idx.Size() || d.Bytes != want || rep.Bytes != d.Bytes {
		t.Errorf("plan %+v: want 2 shards, windows of %d bytes, the index's %d, %d in all", rep, window, idx.Size(), want)
	}
	out.Reset()
	errb.Reset()
	// Blocks of 1 MiB: each shard holds itself and a block at each end,
	// over 2 MiB, and 4 shards are past a cache of 1 MiB.
	code = run(context.Background(), []string{"plan", "--ranks", "2", "--object-block-kb", "1024", "--object-cache-mb", "1", config}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "--object-cache-mb") {
		t.Errorf("a cache below the working set: exit %d, stderr %q; want 1 naming --object-cache-mb", code, errb.String())
	}
	if !strings.Contains(out.String(), "WORKING SET") || !strings.Contains(out.String(), "does NOT fit") {
		t.Errorf("table %q lacks its header or verdict", out.String())
	}
	// A cache of 1 MiB holds the working set of 4 KiB blocks but not the
	// 1.6 MB of data: without run_tokens the dataset is named and plan exits
	// 1 naming run_tokens; in runs it fits.
	for _, runTokens := range []int{0, 4096} {
		job := strings.Replace(job, `"shuffle_window": 2,`, fmt.Sprintf(`"shuffle_window": 2, "run_tokens": %d,`, runTokens), 1)
		if err := os.WriteFile(config, []byte(job), 0o644); err != nil {
			t.Fatal(err)
		}
		out.Reset()
		errb.Reset()
		code = run(context.Background(), []string{"plan", "--ranks", "1", "--world", "2", "--object-block-kb", "4", "--object-cache-mb", "1", "--json", config}, &out, &errb)
		rep = planReport{}
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatal(err)
		}
		named := len(rep.Refetched) == 1 && rep.Refetched[0] == "meg"
		if rep.Bytes > 1<<20 || named != (runTokens == 0) || (code == 1) != (runTokens == 0) || (runTokens == 0) != strings.Contains(errb.String(), "run_tokens") {
			t.Errorf("run_tokens %d: exit %d, stderr %q, report %+v; want meg named and exit 1 only without runs", runTokens, code, errb.String(), rep)
		}
	}
}
