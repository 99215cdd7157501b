package tokenize

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Tokenizer is a byte-level BPE tokenizer: a vocabulary of byte strings, the merges between
// them, a pre-tokenizer pattern and special tokens. It is immutable once loaded and safe for
// concurrent use; each goroutine that encodes much should own an Encoder (NewEncoder), which
// holds the mutable scratch space and piece cache.
type Tokenizer struct {
	name    string            // encoding name or file, for messages
	sha256  string            // hex SHA-256 of what defines it (see SHA256)
	vocab   map[string]int32  // bytes of each mergeable token -> id
	merges  map[uint64]uint64 // pairKey(a, b) -> rank<<32 | merged id
	byteTok [256]int32        // id of each single byte
	// bytePairs holds lookup(byteTok[a], byteTok[b]) at a<<8|b.
	bytePairs []uint64
	tokens    [][]byte         // id -> bytes, for Decode; nil for unused ids
	specials  map[string]int32 // special and added tokens -> id

	// always lists the added tokens recognised even when no special token is allowed:
	// Hugging Face's non-special added tokens.
	always []string

	split  splitter      // pre-tokenizer of the simple path
	hand   *handSplitter // split, when hand-written
	steps  []preStep     // pre-tokenizer steps when the simple path does not apply
	direct bool          // a piece that is itself a token is emitted whole, without merging
	hf     bool          // Hugging Face rules: invalid UTF-8 replaced, gaps kept
	nfc    bool          // the text is put in Unicode NFC first (a Hugging Face normalizer)

	pool sync.Pool // of *Encoder with no special tokens allowed, for Tokenizer.Encode
}

// preStep is one Hugging Face pre-tokenizer step: an optional prefix space, then an optional
// split.
type preStep struct {
	prefixSpace bool
	split       splitter
}

// Name returns the encoding name, or the file the tokenizer was loaded from.
func (t *Tokenizer) Name() string { return t.name }

// SHA256 returns the hex SHA-256 of the bytes that define the tokenizer, so
// that its outputs can name it exactly: a tokenizer.json's contents, or a
// built-in encoding's rank file (checked against tiktoken's on load; the
// encoding's name fixes its pattern and special tokens, so r50k_base and gpt2
// share it). It is empty for a tokenizer that ParseTiktoken built from a
// rank file and a pattern of the caller's.
func (t *Tokenizer) SHA256() string { return t.sha256 }

// VocabSize returns one more than the largest token id, special tokens included.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// SpecialTokens returns the special and added tokens, sorted.
func (t *Tokenizer) SpecialTokens() []string {
	names := make([]string, 0, len(t.specials))
	for s := range t.specials {
		names = append(names, s)
	}
	sort.Strings(names)
	return names
}

// SpecialToken returns the id of a special or added token.
func (t *Tokenizer) SpecialToken(name string) (int32, bool) {
	id, ok := t.specials[name]
	return id, ok
}

// Encode appends the tokens of text to dst, recognising no special token (Hugging Face
// non-special added tokens excepted); it is Encoder.Encode on a pooled Encoder and is safe
// for concurrent use.
func (t *Tokenizer) Encode(dst []int32, text []byte) []int32 {
	e, _ := t.pool.Get().(*Encoder)
	if e == nil {
		e = t.newEncoder(nil)
	}
	dst = e.Encode(dst, text)
	t.pool.Put(e)
	return dst
}

// Decode returns the bytes of the tokens ids. An id that names no token is an error.
func (t *Tokenizer) Decode(ids []int32) ([]byte, error) {
	return t.AppendDecode(nil, ids)
}

// AppendDecode appends the bytes of the tokens ids to dst.
func (t *Tokenizer) AppendDecode(dst []byte, ids []int32) ([]byte, error) {
	for i, id := range ids {
		if id < 0 || int(id) >= len(t.tokens) || t.tokens[id] == nil {
			return dst, fmt.Errorf("tokenizer %s: token %d (at %d) is not in the vocabulary of %d", t.name, id, i, len(t.tokens))
		}
		dst = append(dst, t.tokens[id]...)
	}
	return dst, nil
}

// NewEncoder returns an Encoder for one goroutine. The special tokens named in allowed are
// recognised in the text and encoded as themselves; all others are plain text, as in
// tiktoken's encode_ordinary. Naming a token the tokenizer lacks is an error.
func (t *Tokenizer) NewEncoder(allowed ...string) (*Encoder, error) {
	for _, a := range allowed {
		if _, ok := t.specials[a]; !ok {
			return nil, fmt.Errorf("tokenizer %s: %q is not a special token (known: %s)", t.name, a, strings.Join(t.SpecialTokens(), ", "))
		}
	}
	return t.newEncoder(allowed), nil
}

func (t *Tokenizer) newEncoder(allowed []string) *Encoder {
	e := &Encoder{t: t, cache: newPieceCache()}
	e.s.grow(shortPiece + 1)
	names := slices.Concat(t.always, allowed)
	if len(names) > 0 {
		e.special = newSpecialMatcher(names, t.specials)
	}
	return e
}

// scratch is an Encoder's reusable working memory.
type scratch struct {
	ids   []int32
	ranks []uint64
	next  []int32
	prev  []int32
	heap  []uint64
	ends  []int
	buf   []byte
	norm  []byte
}

// grow makes the merge arrays hold n parts.
func (s *scratch) grow(n int) {
	if len(s.ids) < n {
		s.ids = make([]int32, n)
		s.ranks = make([]uint64, n)
		s.next = make([]int32, n)
		s.prev = make([]int32, n)
	}
}

// specialMatcher finds the allowed special tokens in text: the leftmost, and the longest of
// those that start there (the rule of Hugging Face's added-token matcher; tiktoken's special
// tokens never start one another).
type specialMatcher struct {
	first [256]bool
	byLen []string // longest first
	ids   map[string]int32
}

func newSpecialMatcher(names []string, ids map[string]int32) *specialMatcher {
	m := &specialMatcher{ids: ids}
	for _, n := range names {
		if n == "" || slices.Contains(m.byLen, n) {
			continue
		}
		m.first[n[0]] = true
		m.byLen = append(m.byLen, n)
	}
	sort.SliceStable(m.byLen, func(i, j int) bool { return len(m.byLen[i]) > len(m.byLen[j]) })
	return m
}

// find returns the position, length and id of the first special token in text, or -1.
func (m *specialMatcher) find(text []byte) (int, int, int32) {
	for i, c := range text {
		if !m.first[c] {
			continue
		}
		for _, n := range m.byLen {
			if len(n) <= len(text)-i && string(text[i:i+len(n)]) == n {
				return i, len(n), m.ids[n]
			}
		}
	}
	return -1, 0, 0
}
