package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/state"
	"github.com/dataloaderd/dataloaderd/internal/stream"
	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// explainJob writes a Megatron corpus of unique tokens and a job config
// over it (BOS framed, endless, a shuffle window of 3) and returns the
// config's path and the documents.
func explainJob(t *testing.T) (string, [][]int32) {
	dir := t.TempDir()
	docs, _ := testcorpus.UniqueDocs(rand.New(rand.NewSource(5)), 300, 40, 1)
	testcorpus.Megatron(t, dir, "web", docs)
	config := filepath.Join(dir, "job.json")
	job := `{"seq_len": 31, "batch_size": 3, "seed": 4, "eos_id": 0, "bos_id": 100000, "pad_id": 100001,
		"logical_shards": 6, "shuffle_window": 3, "datasets": [{"name": "web", "path": "web", "format": "megatron"}]}`
	if err := os.WriteFile(config, []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	return config, docs
}

// runExplain runs dataloaderd explain --json with args and decodes its
// report.
func runExplain(t *testing.T, args ...string) explained {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(context.Background(), append([]string{"explain", "--json"}, args...), &out, &errb); code != 0 {
		t.Fatalf("explain %q: exit %d: %s", args, code, errb.String())
	}
	var rep explained
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

// checkExplained checks the pieces of rank r's step against the batch the
// rank made: each piece's columns hold its document's tokens from
// TokenStart, framed as BOS and EOS say, and the pieces tile each line.
func checkExplained(t *testing.T, rep explained, r uint32, step uint64, batch []int32, line int, docs [][]int32) {
	t.Helper()
	next := map[int]int{}
	n := 0
	for _, p := range rep.Pieces {
		if p.DPRank != r || p.Step != step {
			continue
		}
		n++
		toks := batch[p.Line*line+p.ColumnStart : p.Line*line+p.ColumnEnd]
		want := slices.Clone(docs[p.Document][p.TokenStart:p.TokenEnd])
		if p.BOS {
			want = append([]int32{100000}, want...)
		}
		if p.EOS {
			want = append(want, 0)
		}
		if p.ColumnStart != next[p.Line] || !slices.Equal(toks, want) || filepath.Base(p.File) != "web.bin" {
			t.Fatalf("rank %d step %d piece %+v: the line holds %v, the document %v (line's next column %d)", r, step, p, toks, want, next[p.Line])
		}
		next[p.Line] = p.ColumnEnd
	}
	if n == 0 {
		t.Fatalf("rank %d step %d: no pieces", r, step)
	}
	for i := range len(batch) / line {
		for _, tok := range batch[i*line+next[i] : (i+1)*line] {
			if tok != 100001 {
				t.Fatalf("rank %d step %d line %d: column %d on is no piece's and not padding", r, step, i, next[i])
			}
		}
	}
}

// TestExplainCLI: explain, from the run's start and from a checkpoint
// saved by 2 ranks and resumed on 3, names the documents of the batches
// the ranks make, step by step and as a range; --batch-id takes a batch's
// id and refuses another job's.
func TestExplainCLI(t *testing.T) {
	config, docs := explainJob(t)
	cfg, err := readJobConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	corpus, err := stream.OpenCorpus(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer corpus.Close()
	line := cfg.LineTokens()
	ckpt := t.TempDir()
	roots, _ := files.NewRoots(nil)
	folder, err := roots.Folder("test", ckpt)
	if err != nil {
		t.Fatal(err)
	}
	const saveAt = 4
	var blobs [][]byte
	var names []string
	for r := uint32(0); r < 2; r++ {
		rank, err := stream.NewRank(corpus, r, 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		for step := uint64(1); step <= 7; step++ {
			batch := make([]int32, int(cfg.BatchSize)*line)
			if _, err := rank.NextBatch(batch); err != nil {
				t.Fatal(err)
			}
			checkExplained(t, runExplain(t, "--ranks", "2", "--step", fmt.Sprint(step), config), r, step, batch, line, docs)
			if step == saveAt {
				if _, _, err := state.Save(folder, corpus.Fingerprint(), rank.State()); err != nil {
					t.Fatal(err)
				}
				b, _ := state.Encode(corpus.Fingerprint(), rank.State())
				blobs, names = append(blobs, b), append(names, fmt.Sprint(r))
			}
		}
	}
	from, err := state.Merge(corpus.Fingerprint(), names, blobs)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	for r := uint32(0); r < 3; r++ {
		rank, err := stream.NewRank(corpus, r, 3, from)
		if err != nil {
			t.Fatal(err)
		}
		var batches [][]int32
		for range 6 {
			batch := make([]int32, int(cfg.BatchSize)*line)
			if _, err := rank.NextBatch(batch); err != nil {
				t.Fatal(err)
			}
			batches = append(batches, batch)
		}
		all := runExplain(t, "--from", ckpt, "--ranks", "3", "--rank", fmt.Sprint(r), "--steps", fmt.Sprintf("%d-%d", saveAt+1, saveAt+6), config)
		for i, b := range batches {
			checkExplained(t, all, r, uint64(saveAt+1+i), b, line, docs)
		}
		i := rng.Intn(len(batches))
		id := stream.BatchID(all.JobFingerprint, uint64(saveAt+1+i), r, 3)
		one := runExplain(t, "--from", ckpt, "--batch-id", id, config)
		checkExplained(t, one, r, uint64(saveAt+1+i), batches[i], line, docs)
		if one.Pieces[0].BatchID != id {
			t.Fatalf("a piece of batch %s has batch_id %s", id, one.Pieces[0].BatchID)
		}
	}
	checkRefusals(t, config, ckpt)
}

// checkRefusals: explain refuses another job's batch id and a step before
// the checkpoint, naming why, and its table says how each rank got there.
func checkRefusals(t *testing.T, config, ckpt string) {
	var out, errb bytes.Buffer
	other := stream.BatchID("0badf00d", 5, 0, 3)
	if code := run(context.Background(), []string{"explain", "--from", ckpt, "--batch-id", other, config}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "another job") {
		t.Errorf("another job's batch id: exit %d, %q", code, errb.String())
	}
	errb.Reset()
	if code := run(context.Background(), []string{"explain", "--from", ckpt, "--ranks", "3", "--step", "3", config}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "earlier checkpoint") {
		t.Errorf("a step before the checkpoint: exit %d, %q", code, errb.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"explain", "--ranks", "2", "--step", "1000", config}, &out, &errb); code != 0 ||
		!strings.Contains(out.String(), "by counting") || !strings.Contains(out.String(), "web.bin") {
		t.Errorf("the table: exit %d:\n%s", code, out.String())
	}
}

// TestExplainUsage: -h prints explain's usage and exits 0; a command line
// that does not say what to explain exits 2 naming what is missing.
func TestExplainUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"explain", "-h"}, &out, &errb); code != 0 ||
		!strings.Contains(out.String(), "dataloaderd explain --ranks W") || !strings.Contains(out.String(), "-batch-id") {
		t.Errorf("explain -h: exit %d, %q", code, out.String())
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"explain", "--ranks", "2", "x.json"}, "give one of --step, --steps and --batch-id"},
		{[]string{"explain", "--step", "3", "x.json"}, "--ranks (the job's dp_size) is required"},
		{[]string{"explain", "--ranks", "2", "--step", "3"}, "name one config file"},
		{[]string{"explain", "--ranks", "2", "--steps", "5-3", "x.json"}, `--steps "5-3": want A-B`},
		{[]string{"explain", "--ranks", "2", "--rank", "2", "--step", "1", "x.json"}, "--rank 2 is not below --ranks 2"},
		{[]string{"explain", "--batch-id", "abc", "x.json"}, "want <8 hex digits>-s<step>-r<dp_rank>of<dp_size>"},
		{[]string{"explain", "--batch-id", "0badf00d-s3-r1of2", "--ranks", "4", "x.json"}, "is of rank 1 of 2"},
	} {
		out.Reset()
		errb.Reset()
		if code := run(context.Background(), tc.args, &out, &errb); code != 2 || out.Len() > 0 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", tc.args, code, out.String(), errb.String(), tc.want)
		}
	}
}

// TestExplainFromDCP: --from takes a torch.distributed.checkpoint folder
// too: the loader's state in it (under --prefix, or the only one) is the
// resume point, checked against the config as a session's resume_sharded
// is (the fixture's is another corpus's: refused by what differs).
func TestExplainFromDCP(t *testing.T) {
	config, _ := explainJob(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--from", dcpLoader}, "seq_len is 128 in the saved state, 31 now"},
		{[]string{"--from", dcpLoader, "--prefix", "other"}, `holds no loader's state under "other"`},
		{[]string{"--from", dcpNone}, "holds no dataloaderd loader's state"},
		{[]string{"--from", t.TempDir()}, "no dataloader/ directory of rank files (loader.save) and no .metadata"},
	} {
		var out, errb bytes.Buffer
		args := append(append([]string{"explain", "--ranks", "2", "--step", "60"}, tc.args...), config)
		if code := run(context.Background(), args, &out, &errb); code != 1 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 1 and %q", tc.args, code, errb.String(), tc.want)
		}
	}
}
