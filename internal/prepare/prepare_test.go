package prepare

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/source"
	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// writeInputs writes files of JSONL documents "k k+1 ..." and returns the
// documents of each file in order.
func writeInputs(t *testing.T, dir string, files, docsPer int, bad bool) map[string][][]int32 {
	out := map[string][][]int32{}
	next := 1
	for f := 0; f < files; f++ {
		var b strings.Builder
		name := fmt.Sprintf("part-%02d", f)
		for d := 0; d < docsPer; d++ {
			n := 1 + (f*7+d*3)%20
			var words []string
			var doc []int32
			for i := 0; i < n; i++ {
				words = append(words, strconv.Itoa(next))
				doc = append(doc, int32(next))
				next++
			}
			fmt.Fprintf(&b, "{\"text\": %q}\n", strings.Join(words, " "))
			if bad && f == 1 && d == 2 {
				b.WriteString("{\"text\": 12}\n")
			}
			out[name] = append(out[name], doc)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".jsonl"), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func checkOutputs(t *testing.T, out string, want map[string][][]int32) {
	t.Helper()
	for name, docs := range want {
		src, err := source.Open(source.Spec{Name: name, Path: filepath.Join(out, name), Format: files.Megatron})
		if err != nil {
			t.Fatal(err)
		}
		if src.Units() != uint64(len(docs)) {
			t.Fatalf("%s: %d documents, want %d", name, src.Units(), len(docs))
		}
		for u, d := range docs {
			got := make([]int32, len(d))
			if err := src.Read(uint64(u), 0, got); err != nil {
				t.Fatal(err)
			}
			for i := range d {
				if got[i] != d[i] {
					t.Fatalf("%s doc %d token %d: %d, want %d", name, u, i, got[i], d[i])
				}
			}
		}
		src.Close()
	}
}

// TestRunConvertsInOrderAndResumes: every input file becomes a Megatron
// dataset with its documents in order, whatever the workers' timing; a run
// after an interruption (an output missing) redoes only that file.
func TestRunConvertsInOrderAndResumes(t *testing.T) {
	in, out := t.TempDir(), t.TempDir()
	want := writeInputs(t, in, 4, 300, false)
	var progress []Stats
	cfg := Config{Input: in, Format: "jsonl", Encoder: testcorpus.Ints{}, Tokenizer: "ints", TokenizerSHA256: intsSHA, MaxID: 70000, Output: out, Workers: 3,
		Progress: func(s Stats) { progress = append(progress, s) }}
	st, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var tokens uint64
	for _, docs := range want {
		for _, d := range docs {
			tokens += uint64(len(d))
		}
	}
	if st.FilesDone != 4 || st.Documents != 1200 || st.Tokens != tokens || st.BytesDone != st.Bytes {
		t.Fatalf("stats %+v, want 4 files, 1200 documents, %d tokens, all bytes", st, tokens)
	}
	if len(progress) == 0 || progress[len(progress)-1].Tokens != tokens {
		t.Fatalf("progress not reported at the end: %v", progress)
	}
	checkOutputs(t, out, want)

	os.Remove(filepath.Join(out, "part-02.idx"))
	os.Remove(filepath.Join(out, "part-02.bin"))
	st, err = Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if st.FilesSkipped != 3 || st.FilesDone != 1 || st.Documents != 300 {
		t.Fatalf("resumed run: %+v, want 3 skipped and 1 done", st)
	}
	checkOutputs(t, out, want)
}

// TestRunBadRecords: a bad record stops the run with an error naming the
// file and line, and leaves no output for that file; with skip it is counted.
func TestRunBadRecords(t *testing.T) {
	in, out := t.TempDir(), t.TempDir()
	want := writeInputs(t, in, 3, 10, true)
	cfg := Config{Input: in, Format: "jsonl", Encoder: testcorpus.Ints{}, Tokenizer: "ints", TokenizerSHA256: intsSHA, MaxID: 1000, Output: out, Workers: 2}
	_, err := Run(context.Background(), cfg)
	if !errors.Is(err, source.ErrInvalid) || !strings.Contains(err.Error(), "part-01.jsonl") || !strings.Contains(err.Error(), "byte 154: field \"text\": is a number") {
		t.Fatalf("bad record: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "part-01.idx")); !os.IsNotExist(err) {
		t.Fatal("a failed file left an .idx")
	}
	if left, _ := filepath.Glob(filepath.Join(out, "*.tmp")); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	cfg.OnBadRecord = "skip"
	st, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if st.BadRecords != 1 || st.FilesSkipped != 1 || st.FilesDone != 2 {
		t.Fatalf("stats %+v, want 1 bad record, the first file skipped as done", st)
	}
	checkOutputs(t, out, want)
}

func TestRunCancelled(t *testing.T) {
	in, out := t.TempDir(), t.TempDir()
	writeInputs(t, in, 2, 50, false)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, Config{Input: in, Format: "jsonl", Encoder: testcorpus.Ints{}, Tokenizer: "ints", TokenizerSHA256: intsSHA, MaxID: 1000, Output: out, Workers: 2})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "run again") {
		t.Fatalf("cancelled run: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(out, "*")); len(left) > 0 {
		t.Fatalf("a cancelled run left %v", left)
	}
}
