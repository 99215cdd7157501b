package tokenize

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// EnvSearchPath names the environment variable with the directories (separated by ':')
// where LoadEncoding looks for rank files after the directories its caller gives.
const EnvSearchPath = "DATALOADERD_TOKENIZERS"

// r50kPattern is tiktoken's pre-tokenizer pattern for r50k_base, p50k_base and gpt2.
const r50kPattern = `'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s`

// cl100kPattern is tiktoken's pre-tokenizer pattern for cl100k_base.
const cl100kPattern = `'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s`

// encoding describes a built-in encoding: its rank file, the file's SHA-256 as tiktoken
// publishes it, the pattern and the special tokens.
type encoding struct {
	file     string
	sha256   string
	pattern  string
	specials map[string]int32
}

var encodings = map[string]encoding{
	"r50k_base":   {"r50k_base.tiktoken", "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930", r50kPattern, map[string]int32{"<|endoftext|>": 50256}},
	"gpt2":        {"r50k_base.tiktoken", "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930", r50kPattern, map[string]int32{"<|endoftext|>": 50256}},
	"p50k_base":   {"p50k_base.tiktoken", "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069", r50kPattern, map[string]int32{"<|endoftext|>": 50256}},
	"cl100k_base": {"cl100k_base.tiktoken", "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7", cl100kPattern, map[string]int32{"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259, "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}},
	"o200k_base":  {"o200k_base.tiktoken", "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d", o200kPattern, map[string]int32{"<|endoftext|>": 199999, "<|endofprompt|>": 200018}},
}

// Encodings returns the names of the built-in encodings, sorted.
func Encodings() []string {
	names := make([]string, 0, len(encodings))
	for n := range encodings {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// LoadEncoding loads a built-in encoding (see Encodings). The package knows each encoding's
// pattern and special tokens; the ranks come from the file <name>.tiktoken (gpt2 uses
// r50k_base.tiktoken), looked for in dirs in order, then in each directory of
// $DATALOADERD_TOKENIZERS. The file must have the SHA-256 that tiktoken expects of it.
func LoadEncoding(name string, dirs ...string) (*Tokenizer, error) {
	var search []rankDir
	for _, d := range SearchPath(dirs...) {
		search = append(search, rankDir{d, os.ReadFile})
	}
	return loadEncoding(name, search)
}

// rankDir is a directory to look for rank files in, and how to read them.
type rankDir struct {
	dir  string
	read func(path string) ([]byte, error)
}

// loadEncoding is LoadEncoding over the directories of search, in order.
func loadEncoding(name string, search []rankDir) (*Tokenizer, error) {
	enc, ok := encodings[name]
	if !ok {
		return nil, fmt.Errorf("unknown encoding %q (known: %s)", name, strings.Join(Encodings(), ", "))
	}
	var looked []string
	for _, d := range search {
		path := filepath.Join(d.dir, enc.file)
		data, err := d.read(path)
		if errors.Is(err, fs.ErrNotExist) {
			looked = append(looked, path)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("encoding %s: %w", name, err)
		}
		if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != enc.sha256 {
			return nil, fmt.Errorf("encoding %s: %s has SHA-256 %x, want %s", name, path, sum, enc.sha256)
		}
		t, err := ParseTiktoken(path, data, enc.pattern, enc.specials)
		if err != nil {
			return nil, err
		}
		t.name, t.sha256 = name, enc.sha256
		return t, nil
	}
	if len(looked) == 0 {
		return nil, fmt.Errorf("encoding %s: no directory to look for %s in: pass one or set $%s", name, enc.file, EnvSearchPath)
	}
	return nil, fmt.Errorf("encoding %s: %s not found; looked at %s (directories from the caller, then $%s)",
		name, enc.file, strings.Join(looked, ", "), EnvSearchPath)
}

// SearchPath returns dirs followed by the directories listed in $DATALOADERD_TOKENIZERS.
func SearchPath(dirs ...string) []string {
	out := append([]string(nil), dirs...)
	for _, d := range filepath.SplitList(os.Getenv(EnvSearchPath)) {
		if d != "" {
			out = append(out, d)
		}
	}
	return out
}

// LoadTiktoken reads a tiktoken rank file (one "base64(token bytes) rank" per line) and
// builds a tokenizer that splits text with pattern and knows the given special tokens.
func LoadTiktoken(path, pattern string, specials map[string]int32) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseTiktoken(path, data, pattern, specials)
}

// ParseTiktoken is LoadTiktoken on the file's contents; name is used in errors.
func ParseTiktoken(name string, data []byte, pattern string, specials map[string]int32) (*Tokenizer, error) {
	vocab := make(map[string]int32, bytes.Count(data, []byte{'\n'})+1)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	var dec []byte
	for line := 1; sc.Scan(); line++ {
		text := sc.Bytes()
		if len(text) == 0 {
			continue
		}
		tok, rank, ok := bytes.Cut(text, []byte{' '})
		if !ok {
			return nil, fmt.Errorf("%s:%d: want \"base64 rank\", got %q", name, line, clip(text))
		}
		var err error
		dec, err = base64.StdEncoding.AppendDecode(dec[:0], tok)
		if err != nil || len(dec) == 0 {
			return nil, fmt.Errorf("%s:%d: token %q is not base64 of at least one byte", name, line, clip(tok))
		}
		r, err := strconv.ParseInt(string(rank), 10, 32)
		if err != nil || r < 0 {
			return nil, fmt.Errorf("%s:%d: rank %q is not an integer in [0, 2^31)", name, line, clip(rank))
		}
		if prev, dup := vocab[string(dec)]; dup {
			return nil, fmt.Errorf("%s:%d: token %q appears twice (ranks %d and %d)", name, line, dec, prev, r)
		}
		vocab[string(dec)] = int32(r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(vocab) == 0 {
		return nil, fmt.Errorf("%s: no tokens", name)
	}
	split, err := splitterFor(pattern)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	t, err := build(name, vocab, specials)
	if err != nil {
		return nil, err
	}
	// tiktoken merges two parts when their joined bytes are a token, at that token's rank.
	for s, id := range vocab {
		for k := 1; k < len(s); k++ {
			a, ok := vocab[s[:k]]
			if !ok {
				continue
			}
			if b, ok := vocab[s[k:]]; ok {
				t.merges[pairKey(a, b)] = uint64(id)<<32 | uint64(uint32(id))
			}
		}
	}
	t.fillBytePairs()
	t.split, t.hand = split, asHand(split)
	t.direct = true
	return t, nil
}

// build makes a tokenizer's id tables from its mergeable vocabulary and special tokens, and
// checks that ids are not shared and that every single byte is a token.
func build(name string, vocab map[string]int32, specials map[string]int32) (*Tokenizer, error) {
	t := &Tokenizer{name: name, vocab: vocab, merges: make(map[uint64]uint64, 3*len(vocab)), specials: map[string]int32{}}
	size := 0
	for _, id := range vocab {
		size = max(size, int(id)+1)
	}
	for _, id := range specials {
		size = max(size, int(id)+1)
	}
	t.tokens = make([][]byte, size)
	for s, id := range vocab {
		if t.tokens[id] != nil {
			return nil, fmt.Errorf("%s: tokens %q and %q share id %d", name, t.tokens[id], s, id)
		}
		t.tokens[id] = []byte(s)
	}
	for s, id := range specials {
		if id < 0 {
			return nil, fmt.Errorf("%s: special token %q has negative id %d", name, s, id)
		}
		if t.tokens[id] != nil && string(t.tokens[id]) != s {
			return nil, fmt.Errorf("%s: special token %q has id %d, already the id of %q", name, s, id, t.tokens[id])
		}
		t.tokens[id] = []byte(s)
		t.specials[s] = id
	}
	for b := range 256 {
		id, ok := vocab[string([]byte{byte(b)})]
		if !ok {
			return nil, fmt.Errorf("%s: byte 0x%02x is not a token; byte-level BPE needs all 256", name, b)
		}
		t.byteTok[b] = id
	}
	return t, nil
}

// asHand returns s as a hand-written splitter, or nil.
func asHand(s splitter) *handSplitter {
	h, _ := s.(*handSplitter)
	return h
}

// clip shortens b for an error message.
func clip(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}
