package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/state"
	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// TestExplainSkipped: explain says the steps of a skipped range were
// skipped, and names no piece for them, whether the range comes from the
// config's skip_steps or from the log of the checkpoint it starts from;
// the steps after the range are explained as the run served them (the
// same data steps as a run that skipped nothing, made after the range's
// batches were made and dropped).
func TestExplainSkipped(t *testing.T) {
	config, docs := explainJob(t)
	cfg, err := readJobConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	skipping := filepath.Join(filepath.Dir(config), "skipping.json")
	keyed := strings.Replace(string(data), `"seed": 4,`, `"seed": 4, "skip_steps": [[4, 6]],`, 1)
	if err := os.WriteFile(skipping, []byte(keyed), 0o644); err != nil {
		t.Fatal(err)
	}
	corpus, err := stream.OpenCorpus(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer corpus.Close()
	line := cfg.LineTokens()
	// A checkpoint at step 2 whose state logs the range, pending.
	ckpt := t.TempDir()
	roots, _ := files.NewRoots(nil)
	folder, err := roots.Folder("test", ckpt)
	if err != nil {
		t.Fatal(err)
	}
	var batches [2][][]int32
	for r := uint32(0); r < 2; r++ {
		rank, err := stream.NewRank(corpus, r, 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := rank.SkipSteps(0, state.SkipRange{First: 4, Last: 6}); err != nil {
			t.Fatal(err)
		}
		for rank.Step() < 8 {
			batch := make([]int32, int(cfg.BatchSize)*line)
			if _, err := rank.NextBatch(batch); err != nil {
				t.Fatal(err)
			}
			batches[r] = append(batches[r], batch)
			if rank.Step() == 2 {
				if _, _, err := state.Save(folder, corpus.Fingerprint(), rank.State()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, args := range [][]string{{skipping}, {"--from", ckpt, config}} {
		rep := runExplain(t, append([]string{"--ranks", "2", "--steps", "3-8"}, args...)...)
		for r := uint32(0); r < 2; r++ {
			if got := rep.Ranks[r].Skipped; !reflect.DeepEqual(got, []state.SkipRange{{First: 4, Last: 6}}) {
				t.Fatalf("%v: rank %d reports %v skipped, want steps 4 to 6", args, r, got)
			}
			// The rank served steps 1, 2, 3, 7, 8.
			for i, step := range []uint64{3, 7, 8} {
				checkExplained(t, rep, r, step, batches[r][2+i], line, docs)
			}
		}
		for _, p := range rep.Pieces {
			if p.Step >= 4 && p.Step <= 6 {
				t.Fatalf("%v: a piece of skipped step %d: %+v", args, p.Step, p)
			}
		}
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"explain", "--ranks", "2", "--step", "5", skipping}, &out, &errb); code != 0 {
		t.Fatalf("explain: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "rank 1: from step 0 to step 4") || !strings.Contains(out.String(), "steps 5 to 5 skipped (skip_steps") {
		t.Fatalf("the table does not say step 5 was skipped:\n%s", out.String())
	}
	// A config whose blocklist the checkpoint's state did not have: the
	// report says the steps are those a resume under this config serves.
	blocking := filepath.Join(filepath.Dir(config), "blocking.json")
	keyed = strings.Replace(string(data), `"seed": 4,`, `"seed": 4, "blocklist": {"documents": [{"dataset": "web", "document": 0}]},`, 1)
	if err := os.WriteFile(blocking, []byte(keyed), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--from", ckpt, blocking}, {blocking}, {"--from", ckpt, config}} {
		rep := runExplain(t, append([]string{"--ranks", "2", "--step", "3"}, args...)...)
		if want := len(args) == 3 && args[2] == blocking; rep.Ranks[0].BlocklistChanged != want {
			t.Errorf("%v: blocklist_changed %v, want %v", args, rep.Ranks[0].BlocklistChanged, want)
		}
	}
}

// TestExplainSkipStepsRead: a skip_steps entry that is not a [first, last]
// pair is refused, naming it, not cut to its first two numbers.
func TestExplainSkipStepsRead(t *testing.T) {
	config, _ := explainJob(t)
	data, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	for _, entry := range []string{"[4]", "[4, 6, 9]"} {
		bad := filepath.Join(t.TempDir(), "bad.json")
		keyed := strings.Replace(string(data), `"seed": 4,`, `"seed": 4, "skip_steps": [[1, 2], `+entry+`],`, 1)
		if err := os.WriteFile(bad, []byte(keyed), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readJobConfig(bad); err == nil || !strings.Contains(err.Error(), "skip_steps[1] has") {
			t.Errorf("skip_steps entry %s: %v", entry, err)
		}
	}
}
