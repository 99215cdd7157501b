package prepare

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// intsSHA and shiftedSHA stand for the content hashes of the test tokenizers.
const (
	intsSHA    = "1111111111111111111111111111111111111111111111111111111111111111"
	shiftedSHA = "2222222222222222222222222222222222222222222222222222222222222222"
)

// shifted is another tokenizer: the Ints tokens plus 1000.
type shifted struct{}

func (shifted) Encode(dst []int32, text []byte) []int32 {
	n := len(dst)
	dst = testcorpus.Ints{}.Encode(dst, text)
	for i := n; i < len(dst); i++ {
		dst[i] += 1000
	}
	return dst
}

// shift is want with every token plus d and, when eos >= 0, eos appended.
func shift(want map[string][][]int32, d, eos int32) map[string][][]int32 {
	out := map[string][][]int32{}
	for name, docs := range want {
		for _, doc := range docs {
			s := make([]int32, 0, len(doc)+1)
			for _, t := range doc {
				s = append(s, t+d)
			}
			if eos >= 0 {
				s = append(s, eos)
			}
			out[name] = append(out[name], s)
		}
	}
	return out
}

func readRecord(t *testing.T, path string) record {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestRecordBesideEachOutput: every output has a record of the tokenizer
// (name and hash), the format, field and EOS it was made with.
func TestRecordBesideEachOutput(t *testing.T) {
	in, out := t.TempDir(), t.TempDir()
	want := writeInputs(t, in, 2, 20, false)
	cfg := Config{Input: in, Format: "jsonl", Encoder: testcorpus.Ints{}, Tokenizer: "ints", TokenizerSHA256: intsSHA,
		MaxID: 1 << 20, AppendEOS: true, EOS: 0, Output: out, Workers: 2, MadeBy: "dataloaderd test"}
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	for name, docs := range shift(want, 0, 0) {
		rec := readRecord(t, filepath.Join(out, name+".prepare.json"))
		var tokens uint64
		for _, d := range docs {
			tokens += uint64(len(d))
		}
		if rec.Version != 1 || rec.Tokenizer != "ints" || rec.TokenizerSHA256 != intsSHA || rec.Format != "jsonl" ||
			rec.Field != "text" || rec.AppendEOS == nil || *rec.AppendEOS != 0 || rec.MadeBy != "dataloaderd test" ||
			rec.Input != filepath.Join(in, name+".jsonl") || rec.Documents != uint64(len(docs)) || rec.Tokens != tokens {
			t.Errorf("%s: record %+v", name, rec)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(out, "*.tmp")); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// TestRerunWithOtherSettings: a run into a folder whose outputs were made
// with another tokenizer, field or EOS is refused before anything changes,
// naming the file, both settings and --force; a tokenizer of the same hash
// under another name is the same. With Force the outputs are redone.
func TestRerunWithOtherSettings(t *testing.T) {
	in, out := t.TempDir(), t.TempDir()
	want := writeInputs(t, in, 3, 30, false)
	first := Config{Input: in, Format: "jsonl", Encoder: testcorpus.Ints{}, Tokenizer: "ints", TokenizerSHA256: intsSHA,
		MaxID: 1 << 20, Output: out, Workers: 2}
	if _, err := Run(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	renamed := first
	renamed.Tokenizer = "ints-alias"
	if st, err := Run(context.Background(), renamed); err != nil || st.FilesSkipped != 3 {
		t.Fatalf("same hash under another name: %+v %v, want all 3 skipped", st, err)
	}
	other := first
	other.Encoder, other.Tokenizer, other.TokenizerSHA256 = shifted{}, "shifted", shiftedSHA
	otherField := first
	otherField.Field = "body"
	otherEOS := first
	otherEOS.AppendEOS, otherEOS.EOS = true, 7
	for _, tc := range []struct {
		cfg   Config
		asked string
	}{
		{other, `tokenizer shifted (sha256 222222222222…), jsonl field "text", no EOS appended`},
		{otherField, `jsonl field "body"`},
		{otherEOS, "EOS 7 appended"},
	} {
		st, err := Run(context.Background(), tc.cfg)
		var mis *MismatchError
		if !errors.As(err, &mis) || mis.More != 2 || st.FilesDone != 0 {
			t.Fatalf("asked %s: %+v %v, want a MismatchError for 3 files", tc.asked, st, err)
		}
		for _, w := range []string{filepath.Join(out, "part-00") + ".{bin,idx} was made with tokenizer ints (sha256 111111111111…), jsonl field \"text\", no EOS appended",
			"this run asks for " + tc.cfg.settings().String(), tc.asked, "and 2 more", "--force", "empty folder"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q lacks %q", err, w)
			}
		}
	}
	checkOutputs(t, out, want)

	other.Force = true
	st, err := Run(context.Background(), other)
	if err != nil || st.FilesDone != 3 || st.FilesRedone != 3 {
		t.Fatalf("forced: %+v %v, want 3 redone", st, err)
	}
	checkOutputs(t, out, shift(want, 1000, -1))
	if rec := readRecord(t, filepath.Join(out, "part-01.prepare.json")); rec.TokenizerSHA256 != shiftedSHA {
		t.Fatalf("record not redone: %+v", rec)
	}
	other.Force = false
	if st, err := Run(context.Background(), other); err != nil || st.FilesSkipped != 3 {
		t.Fatalf("after the redo: %+v %v, want all 3 skipped", st, err)
	}
}

// TestOutputsWithoutRecord: a finished output with no record (an older
// prepare, another program) or an unreadable one is refused, and redone
// with Force.
func TestOutputsWithoutRecord(t *testing.T) {
	in, out := t.TempDir(), t.TempDir()
	want := writeInputs(t, in, 2, 10, false)
	cfg := Config{Input: in, Format: "jsonl", Encoder: testcorpus.Ints{}, Tokenizer: "ints", TokenizerSHA256: intsSHA,
		MaxID: 1 << 20, Output: out, Workers: 1}
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(out, "part-00.prepare.json"))
	os.WriteFile(filepath.Join(out, "part-01.prepare.json"), []byte("{"), 0o644)
	_, err := Run(context.Background(), cfg)
	var mis *MismatchError
	if !errors.As(err, &mis) || mis.Made != nil || mis.More != 1 ||
		!strings.Contains(err.Error(), "part-00.{bin,idx} was made with unknown settings (no part-00.prepare.json beside it") {
		t.Fatalf("no record: %v", err)
	}
	os.Remove(filepath.Join(out, "part-00.idx"))
	if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "part-01.prepare.json does not parse") {
		t.Fatalf("unreadable record: %v", err)
	}
	cfg.Force = true
	if st, err := Run(context.Background(), cfg); err != nil || st.FilesDone != 2 || st.FilesRedone != 1 {
		t.Fatalf("forced: %+v %v, want part-00 made and part-01 redone", st, err)
	}
	checkOutputs(t, out, want)
}

// TestForcedRedoInterrupted: a redo that fails leaves that output
// unfinished (no .idx), never old data under a new record; outputs redone
// before it keep their new settings, and the others still need Force.
func TestForcedRedoInterrupted(t *testing.T) {
	in, out := t.TempDir(), t.TempDir()
	writeInputs(t, in, 3, 10, true) // part-01 holds a bad record
	cfg := Config{Input: in, Format: "jsonl", OnBadRecord: "skip", Encoder: testcorpus.Ints{}, Tokenizer: "ints",
		TokenizerSHA256: intsSHA, MaxID: 1 << 20, Output: out, Workers: 1}
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	cfg.OnBadRecord, cfg.Encoder, cfg.Tokenizer, cfg.TokenizerSHA256, cfg.Force = "error", shifted{}, "shifted", shiftedSHA, true
	if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "part-01.jsonl") {
		t.Fatalf("bad record: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "part-01.idx")); !os.IsNotExist(err) {
		t.Fatalf("the failed redo left part-01.idx: %v", err)
	}
	if rec := readRecord(t, filepath.Join(out, "part-00.prepare.json")); rec.TokenizerSHA256 != shiftedSHA {
		t.Fatalf("part-00 not redone: %+v", rec)
	}
	cfg.OnBadRecord, cfg.Force = "skip", false
	_, err := Run(context.Background(), cfg)
	var mis *MismatchError
	if !errors.As(err, &mis) || !strings.HasSuffix(mis.Output, "part-02.{bin,idx}") || mis.More != 0 {
		t.Fatalf("after the failed redo: %v, want part-02 alone refused", err)
	}
}
