package tokenize

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
)

// Load loads the tokenizer a config names: a built-in encoding name (looked
// up in dirs, then $DATALOADERD_TOKENIZERS), the path of a Hugging Face
// tokenizer.json, or the path of a built-in encoding's rank file
// (<name>.tiktoken). It also returns the tokenizer's identity, for the
// fingerprint of saved states: the encoding name (its rank file's SHA-256 is
// checked on load) or "tokenizer.json sha256:<first 16 bytes>" of the file.
func Load(spec string, dirs ...string) (*Tokenizer, string, error) {
	return LoadWith(os.ReadFile, spec, dirs...)
}

// LoadWith is Load with the files the config names by path read by
// readFile, so that the caller can confine them: a tokenizer.json, or the
// rank file beside a <name>.tiktoken path. The rank files of built-in
// encodings, in dirs and $DATALOADERD_TOKENIZERS, are the operator's and
// are read with os.ReadFile.
func LoadWith(readFile func(path string) ([]byte, error), spec string, dirs ...string) (*Tokenizer, string, error) {
	switch {
	case strings.HasSuffix(spec, ".json"):
		b, err := readFile(spec)
		if err != nil {
			return nil, "", err
		}
		sum := sha256.Sum256(b)
		tok, err := ParseHF(spec, b)
		return tok, "tokenizer.json sha256:" + hex.EncodeToString(sum[:16]), err
	case strings.HasSuffix(spec, ".tiktoken"):
		name := strings.TrimSuffix(filepath.Base(spec), ".tiktoken")
		search := []rankDir{{filepath.Dir(spec), readFile}}
		for _, d := range SearchPath() {
			search = append(search, rankDir{d, os.ReadFile})
		}
		tok, err := loadEncoding(name, search)
		return tok, name, err
	default:
		tok, err := LoadEncoding(spec, dirs...)
		return tok, spec, err
	}
}
