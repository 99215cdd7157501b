package tokenize

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// byteLevelJSON is the smallest tokenizer.json ParseHF accepts: the 256
// byte-level tokens and no merge; extra goes into the model's fields.
func byteLevelJSON(extra string) []byte {
	var vocab []string
	for r, b := range byteLevelDecoder() {
		vocab = append(vocab, fmt.Sprintf("%q:%d", string(r), b))
	}
	return []byte(`{"added_tokens":[],"normalizer":null,"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false},` +
		`"model":{"type":"BPE",` + extra + `"vocab":{` + strings.Join(vocab, ",") + `},"merges":[]}}`)
}

// TestSHA256OfTokenizerJSON: a tokenizer.json's tokenizer is named by the
// SHA-256 of the file, which the state fingerprint's id abbreviates.
func TestSHA256OfTokenizerJSON(t *testing.T) {
	for _, data := range [][]byte{byteLevelJSON(""), byteLevelJSON(`"dropout":null,`)} {
		read := func(string) ([]byte, error) { return data, nil }
		tok, id, err := LoadWith(read, "/models/x/tokenizer.json")
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		if want := hex.EncodeToString(sum[:]); tok.SHA256() != want {
			t.Errorf("SHA256() = %q, want %q", tok.SHA256(), want)
		}
		if !strings.HasPrefix(tok.SHA256(), strings.TrimPrefix(id, "tokenizer.json sha256:")) {
			t.Errorf("id %q is not an abbreviation of %q", id, tok.SHA256())
		}
	}
}

// TestSHA256OfEncodings: a built-in encoding is named by its rank file's
// SHA-256, the same for gpt2 and r50k_base. It needs the rank files
// (DATALOADERD_TOKENIZER_VOCAB, or where make test puts them).
func TestSHA256OfEncodings(t *testing.T) {
	dir := os.Getenv("DATALOADERD_TOKENIZER_VOCAB")
	if dir == "" {
		dir = filepath.Join("..", "..", ".tools", "tokenize", "vocab")
	}
	if _, err := os.Stat(filepath.Join(dir, "p50k_base.tiktoken")); err != nil {
		t.Skipf("no rank files in %s: %v", dir, err)
	}
	sums := map[string]string{}
	for _, name := range []string{"gpt2", "r50k_base", "p50k_base"} {
		tok, err := LoadEncoding(name, dir)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(dir, encodings[name].file))
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(data); tok.SHA256() != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: SHA256() = %q, want the rank file's %x", name, tok.SHA256(), sum)
		}
		sums[name] = tok.SHA256()
	}
	if sums["gpt2"] != sums["r50k_base"] || sums["gpt2"] == sums["p50k_base"] {
		t.Errorf("gpt2 and r50k_base share a table, p50k_base does not: %v", sums)
	}
}
