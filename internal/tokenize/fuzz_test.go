package tokenize

import (
	"bytes"
	"testing"
	"unicode/utf8"
)

// FuzzEncode encodes arbitrary bytes with the tiny rank table under each hand-written
// pattern, tiktoken-style and Hugging Face-style, and wants no panic and the text back:
// exactly for tiktoken (byte-level BPE loses nothing), and with invalid UTF-8 replaced as
// Python does for Hugging Face.
func FuzzEncode(f *testing.F) {
	for _, s := range []string{"", "hello world", "it's  12345\r\n\n  x", "\xff\xfe", "a\xe2\x82b  \xed\xa0\x80",
		"日本語 😀 e\u0301 ſ'ſ", "<|end|>abc<|end|>", "   \n\t", "HELLOworld don't"} {
		f.Add([]byte(s))
	}
	var toks []*Tokenizer
	var encs []*Encoder
	for _, p := range []string{r50kPattern, cl100kPattern, o200kPattern, gpt2Pattern} {
		tk, err := ParseTiktoken("tiny", tinyRanks("  ", "\n\n", "ll", "he"), p, map[string]int32{"<|end|>": 300})
		if err != nil {
			f.Fatal(err)
		}
		hf, err := ParseTiktoken("tiny", tinyRanks("  ", "\n\n", "ll", "he"), p, map[string]int32{"<|end|>": 300})
		if err != nil {
			f.Fatal(err)
		}
		hf.hf = true
		toks = append(toks, tk, hf)
	}
	for _, tk := range toks {
		e, err := tk.NewEncoder("<|end|>")
		if err != nil {
			f.Fatal(err)
		}
		encs = append(encs, e)
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		for i, tk := range toks {
			for _, enc := range []func([]int32, []byte) []int32{tk.Encode, encs[i].Encode} {
				ids := enc(nil, text)
				back, err := tk.Decode(ids)
				if err != nil {
					t.Fatal(err)
				}
				want := text
				if tk.hf && !utf8.Valid(text) {
					want = appendReplacingInvalid(nil, text)
				}
				if !bytes.Equal(back, want) {
					t.Fatalf("hf=%v: decode(encode(%q)) = %q", tk.hf, text, back)
				}
			}
		}
	})
}
