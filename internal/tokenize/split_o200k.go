package tokenize

// nextO200k matches o200k_base's pattern:
//
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// Call the first class U and the second W. The alternatives are tried in order, and within
// each the optional leading character is tried first with it, then without.
func (s *handSplitter) nextO200k(text []byte, i int) int {
	c, n := s.at(text, i)
	lead := c&(cNewline|cLetter|cNumber) == 0 && i+n < len(text)
	if lead {
		if e := s.o200kLowerWord(text, i+n); e > 0 {
			return s.o200kSuffix(text, e)
		}
	}
	if e := s.o200kLowerWord(text, i); e > 0 {
		return s.o200kSuffix(text, e)
	}
	if lead {
		if e := s.o200kUpperWord(text, i+n); e > 0 {
			return s.o200kSuffix(text, e)
		}
	}
	if e := s.o200kUpperWord(text, i); e > 0 {
		return s.o200kSuffix(text, e)
	}
	if c&cNumber != 0 {
		return s.digits(text, i+n)
	}
	if e := s.punct(text, i, c, n); e > 0 {
		for e < len(text) && (text[e] == '\r' || text[e] == '\n' || text[e] == '/') {
			e++
		}
		return e
	}
	return s.spaceTail(text, i, true)
}

// o200kLowerWord matches U*W+ at i and returns its end, or 0. U* is greedy, so W+ starts at
// the last place it can: right after the U run when a W rune follows it, else at the last W
// rune inside the run (the classes share Lm, Lo and M), where it then ends.
func (s *handSplitter) o200kLowerWord(text []byte, i int) int {
	u, lastW := i, -1
	for u < len(text) {
		c, n := s.at(text, u)
		if c&cUpper == 0 {
			break
		}
		if c&cLower != 0 {
			lastW = u + n
		}
		u += n
	}
	if u < len(text) {
		if c, n := s.at(text, u); c&cLower != 0 {
			return s.run(text, u+n, cLower)
		}
	}
	if lastW > 0 {
		return lastW
	}
	return 0
}

// o200kUpperWord matches U+W* at i and returns its end, or 0.
func (s *handSplitter) o200kUpperWord(text []byte, i int) int {
	if c, _ := s.at(text, i); c&cUpper == 0 {
		return 0
	}
	u := s.run(text, i, cUpper)
	return s.run(text, u, cLower)
}

// o200kSuffix extends a word ending at e by an optional contraction.
func (s *handSplitter) o200kSuffix(text []byte, e int) int {
	if e < len(text) && text[e] == '\'' {
		e += contraction(text, e, true)
	}
	return e
}

// knownPatterns maps the exact regex strings that have a hand-written splitter to it. Any
// other pattern goes to the general regex engine.
var knownPatterns = map[string]struct {
	fam       family
	maxDigits int
	endSpace  bool
}{
	// tiktoken's r50k_base/p50k_base pattern, GPT-2's original, and Hugging Face ByteLevel's.
	`'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s`: {famGPT2, 0, false},
	`'s|'t|'re|'ve|'m|'ll|'d| ?[\p{L}]+| ?[\p{N}]+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`:  {famGPT2, 0, false},
	`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`:      {famGPT2, 0, false},
	// tiktoken's cl100k_base (rewritten with possessive quantifiers and \s++$).
	`'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s`: {famCL100k, 3, true},
	// The original cl100k_base pattern, as Llama 3 / 3.1 / OLMo 2 tokenizer.json files carry it.
	`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`: {famCL100k, 3, false},
	// Qwen 2 / 2.5 / 3: the same with one digit per piece.
	`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`: {famCL100k, 1, false},
	// tiktoken's o200k_base.
	o200kPattern: {famO200k, 3, false},
}

const o200kPattern = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|` +
	`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|` +
	`\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// splitterFor returns the splitter of a regex pattern: the hand-written one when the pattern
// is known, else the general engine.
func splitterFor(pattern string) (splitter, error) {
	if k, ok := knownPatterns[pattern]; ok {
		return newHandSplitter(k.fam, k.maxDigits, k.endSpace), nil
	}
	return newRegexSplitter(pattern)
}
