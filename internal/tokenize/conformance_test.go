package tokenize

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// EnvConformance names the directory made by scripts/tokenizer_conformance.py. When it is
// unset, the tests look in the repository's .tools/tokenize/conformance.
const EnvConformance = "DATALOADERD_TOKENIZE_CONFORMANCE"

// conformanceSet is a loaded conformance directory.
type conformanceSet struct {
	dir      string
	Vocab    string `json:"vocab"`
	Tiktoken string `json:"tiktoken"`
	HF       string `json:"tokenizers"`
	Docs     []struct {
		File  string `json:"file"`
		Kind  string `json:"kind"`
		Valid bool   `json:"valid"`
	} `json:"docs"`
	Run []struct {
		Name string `json:"name"`
		Kind string `json:"kind"`
		Path string `json:"path"`
	} `json:"tokenizers_run"`
	text [][]byte
}

// loadConformance returns the conformance set, or skips the test when there is none. It
// fails instead when CI=true or DATALOADERD_TOKENIZE_REQUIRE=1, so CI never passes by
// skipping.
func loadConformance(tb testing.TB) *conformanceSet {
	tb.Helper()
	dir := os.Getenv(EnvConformance)
	if dir == "" {
		dir = filepath.Join("..", "..", ".tools", "tokenize", "conformance")
	}
	data, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		msg := fmt.Sprintf("no conformance set (%v); run `make test-tokenize` to make one", err)
		if os.Getenv("CI") == "true" || os.Getenv("DATALOADERD_TOKENIZE_REQUIRE") == "1" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	cs := &conformanceSet{dir: dir}
	if err := json.Unmarshal(data, cs); err != nil {
		tb.Fatalf("%s/manifest.json: %v", dir, err)
	}
	for _, d := range cs.Docs {
		b, err := os.ReadFile(filepath.Join(dir, "docs", d.File))
		if err != nil {
			tb.Fatal(err)
		}
		cs.text = append(cs.text, b)
	}
	return cs
}

// load returns the tokenizer of run entry i.
func (cs *conformanceSet) load(tb testing.TB, i int) *Tokenizer {
	tb.Helper()
	r := cs.Run[i]
	var t *Tokenizer
	var err error
	if r.Kind == "tiktoken" {
		t, err = LoadEncoding(r.Name, cs.Vocab)
	} else {
		t, err = LoadHF(r.Path)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

func readIDs(path string) ([]int32, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	ids := make([]int32, len(b)/4)
	_, err = binary.Decode(b, binary.LittleEndian, ids)
	return ids, err
}

// TestConformance compares, document by document, the ids of every tokenizer with the
// references' ids, and checks that decoding gives the text back.
func TestConformance(t *testing.T) {
	cs := loadConformance(t)
	t.Logf("references: tiktoken %s, tokenizers %s; %d documents", cs.Tiktoken, cs.HF, len(cs.Docs))
	for i, r := range cs.Run {
		t.Run(r.Name, func(t *testing.T) {
			tk := cs.load(t, i)
			plain := tk.newEncoder(nil)
			special, err := tk.NewEncoder(tk.SpecialTokens()...)
			if err != nil {
				t.Fatal(err)
			}
			bad := 0
			for j, d := range cs.Docs {
				text := cs.text[j]
				e, dir := plain, r.Name
				if d.Kind == "specials" {
					e, dir = special, r.Name+"+special"
				}
				want, err := readIDs(filepath.Join(cs.dir, "ids", dir, d.File+".ids"))
				if err != nil {
					t.Fatal(err)
				}
				got := e.Encode(nil, text)
				if !slices.Equal(got, want) {
					bad++
					if bad <= 5 {
						t.Errorf("%s: %s", d.File, describeMismatch(tk, got, want))
					}
					continue
				}
				back, err := tk.Decode(got)
				if err != nil {
					t.Fatalf("%s: %v", d.File, err)
				}
				if exp := roundTrip(tk, text, d.Valid); exp != nil && !bytes.Equal(back, exp) {
					t.Errorf("%s: decode(encode(x)) != x", d.File)
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d documents differ from the reference", bad, len(cs.Docs))
			}
		})
	}
}

// roundTrip returns what decoding the tokens of text must give, or nil when the reference
// changed the text (Hugging Face replaces invalid UTF-8).
func roundTrip(tk *Tokenizer, text []byte, valid bool) []byte {
	switch {
	case !tk.hf:
		return text
	case !valid, len(tk.steps) > 0 && tk.steps[0].prefixSpace:
		return nil
	case tk.nfc:
		return appendNFC(nil, text)
	}
	return text
}

// describeMismatch shows where two token sequences part, with the text around it.
func describeMismatch(tk *Tokenizer, got, want []int32) string {
	k := 0
	for k < len(got) && k < len(want) && got[k] == want[k] {
		k++
	}
	show := func(ids []int32) string {
		ids = ids[k:min(len(ids), k+8)]
		var parts []string
		for _, id := range ids {
			b, _ := tk.Decode([]int32{id})
			parts = append(parts, fmt.Sprintf("%d:%q", id, b))
		}
		return fmt.Sprint(parts)
	}
	ctx, _ := tk.Decode(want[max(0, k-4):k])
	return fmt.Sprintf("first difference at token %d (of %d/%d) after %q:\n  got  %s\n  want %s",
		k, len(got), len(want), ctx, show(got), show(want))
}
