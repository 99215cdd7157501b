package tokenize

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// hfFile is the part of a Hugging Face tokenizer.json this package reads.
type hfFile struct {
	AddedTokens []struct {
		ID         int32  `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Special    bool   `json:"special"`
	} `json:"added_tokens"`
	Normalizer   *hfStep `json:"normalizer"`
	PreTokenizer *hfStep `json:"pre_tokenizer"`
	Model        struct {
		Type          string           `json:"type"`
		Vocab         map[string]int32 `json:"vocab"`
		Merges        json.RawMessage  `json:"merges"`
		Dropout       *float64         `json:"dropout"`
		ContinuingPfx *string          `json:"continuing_subword_prefix"`
		EndOfWordSfx  *string          `json:"end_of_word_suffix"`
		ByteFallback  bool             `json:"byte_fallback"`
		IgnoreMerges  bool             `json:"ignore_merges"`
	} `json:"model"`
}

// hfStep is a normalizer or pre-tokenizer, possibly a Sequence of them.
type hfStep struct {
	Type           string   `json:"type"`
	Normalizers    []hfStep `json:"normalizers"`
	PreTokenizers  []hfStep `json:"pretokenizers"`
	AddPrefixSpace bool     `json:"add_prefix_space"`
	UseRegex       *bool    `json:"use_regex"`
	Behavior       string   `json:"behavior"`
	Invert         bool     `json:"invert"`
	Pattern        struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
}

// LoadHF reads a Hugging Face tokenizer.json with a byte-level BPE model. It accepts a BPE
// model (merges as "a b" strings or as pairs), no normalizer or NFC, a pre-tokenizer made of
// ByteLevel and Split (regex, Isolated) steps, possibly in a Sequence, and added tokens. It
// refuses anything else, naming the field. The post-processor and decoder are not used:
// Encode adds no BOS/EOS, and Decode returns the raw bytes.
func LoadHF(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseHF(path, data)
}

// ParseHF is LoadHF on the file's contents; name is used in errors.
func ParseHF(name string, data []byte) (*Tokenizer, error) {
	var f hfFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%s: not a tokenizer.json: %w", name, err)
	}
	m := &f.Model
	switch {
	case m.Type != "BPE":
		return nil, fmt.Errorf("%s: model.type is %q; only BPE is supported", name, m.Type)
	case m.Dropout != nil && *m.Dropout != 0:
		return nil, fmt.Errorf("%s: model.dropout is %v; only deterministic BPE is supported", name, *m.Dropout)
	case m.ContinuingPfx != nil && *m.ContinuingPfx != "":
		return nil, fmt.Errorf("%s: model.continuing_subword_prefix %q is not supported", name, *m.ContinuingPfx)
	case m.EndOfWordSfx != nil && *m.EndOfWordSfx != "":
		return nil, fmt.Errorf("%s: model.end_of_word_suffix %q is not supported", name, *m.EndOfWordSfx)
	case m.ByteFallback:
		return nil, fmt.Errorf("%s: model.byte_fallback is set; only byte-level BPE is supported", name)
	}
	nfc, err := hfNormalizer(f.Normalizer)
	if err != nil {
		return nil, fmt.Errorf("%s: normalizer: %w", name, err)
	}
	steps, byteLevel, err := hfPreTokenizer(f.PreTokenizer, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: pre_tokenizer: %w", name, err)
	}
	if !byteLevel {
		return nil, fmt.Errorf("%s: pre_tokenizer has no ByteLevel step, so the model is not byte-level BPE", name)
	}

	specials := map[string]int32{}
	var always []string
	for i, a := range f.AddedTokens {
		if a.SingleWord || a.LStrip || a.RStrip {
			return nil, fmt.Errorf("%s: added_tokens[%d] (%q): single_word, lstrip and rstrip are not supported", name, i, a.Content)
		}
		specials[a.Content] = a.ID
		if !a.Special {
			always = append(always, a.Content)
		}
	}
	unmap := byteLevelDecoder()
	vocab := make(map[string]int32, len(m.Vocab))
	for s, id := range m.Vocab {
		b, ok := unmapByteLevel(unmap, s)
		if !ok {
			if _, added := specials[s]; added {
				continue
			}
			return nil, fmt.Errorf("%s: model.vocab: token %q (id %d) is not in the byte-level alphabet", name, s, id)
		}
		vocab[b] = id
	}
	t, err := build(name, vocab, specials)
	if err != nil {
		return nil, err
	}
	t.always, t.nfc, t.hf, t.direct = always, nfc, true, m.IgnoreMerges
	if err := hfMerges(t, name, m.Merges, m.Vocab); err != nil {
		return nil, err
	}
	t.fillBytePairs()
	if len(steps) == 1 && !steps[0].prefixSpace {
		t.split, t.hand = steps[0].split, asHand(steps[0].split)
	} else {
		t.steps = steps
		if len(steps) == 0 {
			t.steps = []preStep{}
		}
	}
	sum := sha256.Sum256(data)
	t.sha256 = hex.EncodeToString(sum[:])
	return t, nil
}

// hfMerges reads model.merges into t: the merge at index i has rank i.
func hfMerges(t *Tokenizer, name string, raw json.RawMessage, vocab map[string]int32) error {
	var pairs [][2]string
	var strs []string
	if err := json.Unmarshal(raw, &strs); err == nil {
		pairs = make([][2]string, len(strs))
		for i, s := range strs {
			a, b, ok := strings.Cut(s, " ")
			if !ok || strings.Contains(b, " ") {
				return fmt.Errorf("%s: model.merges[%d] is %q; want two tokens separated by one space", name, i, s)
			}
			pairs[i] = [2]string{a, b}
		}
	} else if err := json.Unmarshal(raw, &pairs); err != nil {
		return fmt.Errorf("%s: model.merges is neither a list of \"a b\" strings nor of pairs: %w", name, err)
	}
	for i, p := range pairs {
		a, okA := vocab[p[0]]
		b, okB := vocab[p[1]]
		c, okC := vocab[p[0]+p[1]]
		if !okA || !okB || !okC {
			return fmt.Errorf("%s: model.merges[%d] (%q %q): a token or their merge is not in model.vocab", name, i, p[0], p[1])
		}
		t.merges[pairKey(a, b)] = uint64(i)<<32 | uint64(uint32(c))
	}
	return nil
}

// hfNormalizer accepts no normalizer, or NFC, possibly in a Sequence.
func hfNormalizer(n *hfStep) (nfc bool, err error) {
	if n == nil {
		return false, nil
	}
	switch n.Type {
	case "NFC":
		return true, nil
	case "Sequence":
		for i := range n.Normalizers {
			one, err := hfNormalizer(&n.Normalizers[i])
			if err != nil {
				return false, err
			}
			nfc = nfc || one
		}
		return nfc, nil
	}
	return false, fmt.Errorf("type %q changes the text and is not supported (only NFC is)", n.Type)
}

// hfPreTokenizer turns a pre-tokenizer into steps, and says whether one is ByteLevel.
func hfPreTokenizer(p *hfStep, steps []preStep) ([]preStep, bool, error) {
	if p == nil {
		return steps, false, nil
	}
	switch p.Type {
	case "Sequence":
		seen := false
		for i := range p.PreTokenizers {
			var one bool
			var err error
			steps, one, err = hfPreTokenizer(&p.PreTokenizers[i], steps)
			if err != nil {
				return nil, false, fmt.Errorf("pretokenizers[%d]: %w", i, err)
			}
			seen = seen || one
		}
		return steps, seen, nil
	case "ByteLevel":
		st := preStep{prefixSpace: p.AddPrefixSpace}
		if p.UseRegex == nil || *p.UseRegex {
			st.split, _ = splitterFor(gpt2HFPattern)
		}
		if st.prefixSpace || st.split != nil {
			steps = append(steps, st)
		}
		return steps, true, nil
	case "Split":
		if p.Pattern.Regex == nil {
			return nil, false, fmt.Errorf("pre-tokenizer Split: only a Regex pattern is supported")
		}
		if p.Behavior != "Isolated" || p.Invert {
			return nil, false, fmt.Errorf("pre-tokenizer Split: behavior %q, invert %v; only Isolated, not inverted, is supported", p.Behavior, p.Invert)
		}
		s, err := splitterFor(*p.Pattern.Regex)
		if err != nil {
			return nil, false, fmt.Errorf("pre-tokenizer Split: %w", err)
		}
		return append(steps, preStep{split: s}), false, nil
	}
	return nil, false, fmt.Errorf("type %q is not supported (ByteLevel, Split and Sequence are)", p.Type)
}

// gpt2HFPattern is the pattern of Hugging Face's ByteLevel pre-tokenizer.
const gpt2HFPattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// byteLevelDecoder returns the inverse of GPT-2's bytes_to_unicode: printable bytes stand for
// themselves, the 68 others for U+0100 onwards in byte order.
func byteLevelDecoder() map[rune]byte {
	m := make(map[rune]byte, 256)
	next := rune(256)
	for b := range 256 {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE {
			m[rune(b)] = byte(b)
		} else {
			m[next] = byte(b)
			next++
		}
	}
	return m
}

// unmapByteLevel turns a byte-level token string back into its bytes.
func unmapByteLevel(unmap map[rune]byte, s string) (string, bool) {
	b := make([]byte, 0, len(s))
	for _, r := range s {
		c, ok := unmap[r]
		if !ok {
			return "", false
		}
		b = append(b, c)
	}
	return string(b), true
}
