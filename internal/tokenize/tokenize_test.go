package tokenize

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tinyRanks is a rank file of the 256 bytes (rank = byte value) and four merged tokens.
func tinyRanks(extra ...string) []byte {
	var b strings.Builder
	for i := range 256 {
		fmt.Fprintf(&b, "%s %d\n", base64.StdEncoding.EncodeToString([]byte{byte(i)}), i)
	}
	for i, s := range append([]string{"ab", "bc", "abc", "cd"}, extra...) {
		fmt.Fprintf(&b, "%s %d\n", base64.StdEncoding.EncodeToString([]byte(s)), 256+i)
	}
	return []byte(b.String())
}

func tinyTokenizer(t *testing.T) *Tokenizer {
	t.Helper()
	tk, err := ParseTiktoken("tiny", tinyRanks(), r50kPattern, map[string]int32{"<|end|>": 300})
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// TestEncodeTiny checks merges worked out by hand on the tiny rank table.
func TestEncodeTiny(t *testing.T) {
	tk := tinyTokenizer(t)
	for _, c := range []struct {
		text string
		want []int32
	}{
		{"abcd", []int32{258, 'd'}},                                   // ab (256), then ab+c = abc (258); abcd is no token
		{"bcd", []int32{257, 'd'}},                                    // bc (257) ranks before cd (259)
		{"abc", []int32{258}},                                         // a whole token is taken as is
		{"xabx", []int32{'x', 256, 'x'}},                              // one piece, merged inside
		{"ab cd", []int32{256, ' ', 259}},                             // " cd": space and cd never merge
		{"cdcd", []int32{259, 259}},                                   // equal ranks: leftmost first
		{"a<|end|>", []int32{'a', '<', '|', 'e', 'n', 'd', '|', '>'}}, // ordinary by default
		{"", nil},
	} {
		got := tk.Encode(nil, []byte(c.text))
		if !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.text, got, c.want)
		}
		back, err := tk.Decode(got)
		if err != nil || string(back) != c.text {
			t.Errorf("Decode(Encode(%q)) = %q, %v", c.text, back, err)
		}
	}
	e, err := tk.NewEncoder("<|end|>")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := e.Encode(nil, []byte("ab<|end|>cd")), []int32{256, 300, 259}; !slices.Equal(got, want) {
		t.Errorf("with <|end|> allowed: %v, want %v", got, want)
	}
	if _, err := tk.NewEncoder("<|nope|>"); err == nil || !strings.Contains(err.Error(), "<|end|>") {
		t.Errorf("unknown special token: error %v should list the known ones", err)
	}
	if _, err := tk.Decode([]int32{5000}); err == nil || !strings.Contains(err.Error(), "5000") {
		t.Errorf("Decode of a bad id: error %v should name it", err)
	}
}

// TestLongPieceHeap checks that the heap merge of long pieces agrees with the quadratic one.
func TestLongPieceHeap(t *testing.T) {
	tk := tinyTokenizer(t)
	var s scratch
	s.grow(4096)
	for _, n := range []int{2, 3, 7, 50, 97, 300, 1000} {
		var p []byte
		for i := range n {
			p = append(p, "abcdxcdab"[i*7%9])
		}
		quad := tk.bpe(nil, p[:min(len(p), shortPiece)], &s)
		heap := tk.bpeHeap(nil, p[:min(len(p), shortPiece)], &s)
		if !slices.Equal(quad, heap) {
			t.Errorf("n=%d: quadratic %v, heap %v", n, quad, heap)
		}
		back, _ := tk.Decode(tk.bpeHeap(nil, p, &s))
		if string(back) != string(p) {
			t.Errorf("n=%d: heap merge does not round trip", n)
		}
	}
}

// TestInvalidUTF8Tiktoken checks tiktoken's rule for bytes that are not UTF-8: everything
// from the last piece before the first bad byte to the end is one piece.
func TestInvalidUTF8Tiktoken(t *testing.T) {
	tk := tinyTokenizer(t)
	for _, c := range []struct {
		text string
		want []int32
	}{
		{"ab \xffcd ab", []int32{256, ' ', 0xff, 259, ' ', 256}}, // " \xffcd ab" is one piece
		{"x\xffab", []int32{'x', 0xff, 256}},                     // "x" is the last piece: redone with the rest
		{"\xff", []int32{0xff}},
	} {
		got := tk.Encode(nil, []byte(c.text))
		if !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.text, got, c.want)
		}
	}
}

// TestReplaceInvalid checks Python's "replace" decoding, one U+FFFD per maximal subpart.
func TestReplaceInvalid(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"a\xe2\x82x", "a\uFFFDx"},                       // truncated 3-byte sequence
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"},           // a surrogate: ED then A0 is ill-formed
		{"\xf0\x9f\x98", "\uFFFD"},                       // truncated emoji
		{"\xc0\xaf", "\uFFFD\uFFFD"},                     // overlong
		{"\xf4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"}, // above U+10FFFF
		{"ok\U0001F600", "ok\U0001F600"},
	} {
		if got := string(appendReplacingInvalid(nil, []byte(c.in))); got != c.want {
			t.Errorf("replace(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestLoadErrors checks that bad rank files and names are refused with what is at fault.
func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvSearchPath, "")
	for _, c := range []struct {
		name, data, want string
	}{
		{"no space", "QQ==\n", "tiny:1"},
		{"bad base64", "@@@ 1\n", "not base64"},
		{"bad rank", "QQ== x\n", `rank "x"`},
		{"duplicate", "QQ== 1\nQQ== 2\n", "twice"},
		{"missing bytes", "QQ== 0\n", "byte 0x00"},
		{"empty", "", "no tokens"},
	} {
		_, err := ParseTiktoken("tiny", []byte(c.data), r50kPattern, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to mention %q", c.name, err, c.want)
		}
	}
	_, err := LoadEncoding("cl99k")
	if err == nil || !strings.Contains(err.Error(), "cl100k_base") {
		t.Errorf("unknown encoding: error %v should list the known ones", err)
	}
	_, err = LoadEncoding("o200k_base", dir)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "o200k_base.tiktoken")) {
		t.Errorf("missing file: error %v should name where it looked", err)
	}
	os.WriteFile(filepath.Join(dir, "r50k_base.tiktoken"), tinyRanks(), 0o644)
	_, err = LoadEncoding("gpt2", dir)
	if err == nil || !strings.Contains(err.Error(), "SHA-256") {
		t.Errorf("wrong file: error %v should say its hash is wrong", err)
	}
}

// TestParseHFErrors checks that tokenizer.json files this package cannot honour are refused,
// naming the field.
func TestParseHFErrors(t *testing.T) {
	ok := `{"added_tokens":[],"normalizer":null,"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false},
		"model":{"type":"BPE","vocab":{VOCAB},"merges":[]}}`
	var vocab []string
	unmap := byteLevelDecoder()
	for r, b := range unmap {
		vocab = append(vocab, fmt.Sprintf("%q:%d", string(r), b))
	}
	ok = strings.Replace(ok, "VOCAB", strings.Join(vocab, ","), 1)
	if _, err := ParseHF("ok.json", []byte(ok)); err != nil {
		t.Fatalf("minimal byte-level file refused: %v", err)
	}
	for _, c := range []struct{ name, from, to, want string }{
		{"wordpiece", `"type":"BPE"`, `"type":"WordPiece"`, "model.type"},
		{"lowercase", `"normalizer":null`, `"normalizer":{"type":"Lowercase"}`, "normalizer"},
		{"metaspace", `"type":"ByteLevel"`, `"type":"Metaspace"`, "pre_tokenizer"},
		{"bad merge", `"merges":[]`, `"merges":["a zz"]`, "model.merges[0]"},
		{"corrupt", `{"added_tokens"`, `{"added_tokens`, "not a tokenizer.json"},
		{"lstrip", `"added_tokens":[]`, `"added_tokens":[{"id":300,"content":"<x>","lstrip":true}]`, "added_tokens[0]"},
	} {
		_, err := ParseHF("bad.json", []byte(strings.Replace(ok, c.from, c.to, 1)))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "bad.json") {
			t.Errorf("%s: error %v, want it to name bad.json and %q", c.name, err, c.want)
		}
	}
}

// TestConcurrentEncode shares one Tokenizer between goroutines, through Tokenizer.Encode
// and through one Encoder each (run with -race).
func TestConcurrentEncode(t *testing.T) {
	tk := tinyTokenizer(t)
	text := []byte(strings.Repeat("abcd bcd xabx cdcd \xff ab\n", 50))
	want := tk.Encode(nil, text)
	done := make(chan []int32)
	for g := range 4 {
		go func() {
			var ids []int32
			if g%2 == 0 {
				e, _ := tk.NewEncoder()
				for range 20 {
					ids = e.Encode(ids[:0], text)
				}
			} else {
				for range 20 {
					ids = tk.Encode(ids[:0], text)
				}
			}
			done <- ids
		}()
	}
	for range 4 {
		if got := <-done; !slices.Equal(got, want) {
			t.Fatalf("concurrent encode differs")
		}
	}
}
