package tokenize

// A splitter cuts valid UTF-8 text into pre-tokenizer pieces. split appends to ends the end
// offset of each piece in order, so pieces tile the text; a stretch the pattern did not match
// (a gap: never with the hand-written splitters) is appended as ^end, a negative number.
type splitter interface {
	split(ends []int, text []byte) []int
}

// Pattern families with a hand-written splitter. Each emulates, byte for byte, what a
// backtracking regex engine (fancy-regex in tiktoken, Oniguruma in Hugging Face tokenizers)
// does with the patterns listed in knownPatterns: leftmost-first alternation, greedy
// quantifiers, and the look-ahead in \s+(?!\S).
type family uint8

const (
	famGPT2   family = iota + 1 // r50k_base, p50k_base, GPT-2's ByteLevel pre-tokenizer
	famCL100k                   // cl100k_base, Llama 3, Qwen 2/3 (one digit per piece)
	famO200k                    // o200k_base
)

// handSplitter is the hand-written splitter of one pattern.
type handSplitter struct {
	fam       family
	maxDigits int  // \p{N}{1,3} or \p{N}: 3 or 1 (famCL100k, famO200k)
	endSpace  bool // the pattern has \s++$ before \s*[\r\n] (tiktoken's rewritten cl100k)
	cls       *classTable
	ascii     [128]uint8
}

func newHandSplitter(fam family, maxDigits int, endSpace bool) *handSplitter {
	s := &handSplitter{fam: fam, maxDigits: maxDigits, endSpace: endSpace, cls: loadClasses()}
	for c := range s.ascii {
		s.ascii[c] = s.cls.of(rune(c))
	}
	return s
}

// at returns the class bits and byte length of the rune at text[i].
func (s *handSplitter) at(text []byte, i int) (uint8, int) {
	if c := text[i]; c < 0x80 {
		return s.ascii[c], 1
	}
	return s.cls.at(text, i)
}

// run returns the end of the run of runes from i whose classes intersect want.
func (s *handSplitter) run(text []byte, i int, want uint8) int {
	for i < len(text) {
		c, n := s.at(text, i)
		if c&want == 0 {
			break
		}
		i += n
	}
	return i
}

// runOther returns the end of the run from i of [^\s\p{L}\p{N}].
func (s *handSplitter) runOther(text []byte, i int) int {
	for i < len(text) {
		c, n := s.at(text, i)
		if c&(cSpace|cLetter|cNumber) != 0 {
			break
		}
		i += n
	}
	return i
}

// contraction returns the length of the contraction 's 't 're 've 'm 'll 'd at text[i]
// (which holds an apostrophe), or 0. With fold, letters match in any case, as (?i:...) does
// in both engines; simple case folding adds U+017F LATIN SMALL LETTER LONG S to s.
func contraction(text []byte, i int, fold bool) int {
	rest := text[i+1:]
	if len(rest) == 0 {
		return 0
	}
	low := func(c byte) byte {
		if fold && 'A' <= c && c <= 'Z' {
			return c + 'a' - 'A'
		}
		return c
	}
	switch low(rest[0]) {
	case 's', 't', 'm', 'd':
		return 2
	case 'r', 'v':
		if len(rest) > 1 && low(rest[1]) == 'e' {
			return 3
		}
	case 'l':
		if len(rest) > 1 && low(rest[1]) == 'l' {
			return 3
		}
	case 0xC5:
		if fold && len(rest) > 1 && rest[1] == 0xBF { // U+017F
			return 3
		}
	}
	return 0
}

// spaceTail ends a piece that starts with white space at i, for the tail alternatives of
// the patterns: [\s++$] \s*[\r\n]+ (cl100k and o200k only), \s+(?!\S), \s+.
func (s *handSplitter) spaceTail(text []byte, i int, newlines bool) int {
	k, last, nlEnd := i, i, -1
	for k < len(text) {
		c, n := s.at(text, k)
		if c&cSpace == 0 {
			break
		}
		if c&cNewline != 0 {
			nlEnd = k + n
		}
		last = k
		k += n
	}
	switch {
	case k == len(text) && (s.endSpace || !newlines):
		return k
	case newlines && nlEnd > 0:
		return nlEnd
	case k == len(text):
		return k
	case last > i:
		return last // leave one space to lead the next word
	default:
		return k
	}
}

func (s *handSplitter) split(ends []int, text []byte) []int {
	for i := 0; i < len(text); {
		i = s.next(text, i)
		ends = append(ends, i)
	}
	return ends
}

// next returns the end of the piece that starts at text[i], i < len(text).
func (s *handSplitter) next(text []byte, i int) int {
	switch s.fam {
	case famGPT2:
		return s.nextGPT2(text, i)
	case famCL100k:
		return s.nextCL100k(text, i)
	default:
		return s.nextO200k(text, i)
	}
}

// nextGPT2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func (s *handSplitter) nextGPT2(text []byte, i int) int {
	if text[i] == '\'' {
		if n := contraction(text, i, false); n > 0 {
			return i + n
		}
	}
	j := i
	if text[i] == ' ' && i+1 < len(text) {
		j++
	}
	c, n := s.at(text, j)
	switch {
	case c&cLetter != 0:
		return s.run(text, j+n, cLetter)
	case c&cNumber != 0:
		return s.run(text, j+n, cNumber)
	case c&cSpace == 0:
		return s.runOther(text, j+n)
	}
	return s.spaceTail(text, i, false)
}

// nextCL100k: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ and its possessive rewrite.
func (s *handSplitter) nextCL100k(text []byte, i int) int {
	if text[i] == '\'' {
		if n := contraction(text, i, true); n > 0 {
			return i + n
		}
	}
	c, n := s.at(text, i)
	if c&cLetter != 0 {
		return s.run(text, i+n, cLetter)
	}
	if c&(cNewline|cNumber) == 0 && i+n < len(text) {
		if c2, n2 := s.at(text, i+n); c2&cLetter != 0 {
			return s.run(text, i+n+n2, cLetter)
		}
	}
	if c&cNumber != 0 {
		return s.digits(text, i+n)
	}
	if e := s.punct(text, i, c, n); e > 0 {
		for e < len(text) && (text[e] == '\r' || text[e] == '\n') {
			e++
		}
		return e
	}
	return s.spaceTail(text, i, true)
}

// punct matches ` ?[^\s\p{L}\p{N}]+` at i (class c, length n), returning its end or 0.
func (s *handSplitter) punct(text []byte, i int, c uint8, n int) int {
	if c&(cSpace|cLetter|cNumber) == 0 {
		return s.runOther(text, i+n)
	}
	if text[i] == ' ' && i+1 < len(text) {
		if c2, n2 := s.at(text, i+1); c2&(cSpace|cLetter|cNumber) == 0 {
			return s.runOther(text, i+1+n2)
		}
	}
	return 0
}

// digits ends a run of numbers that began with one ending at e: at most
// maxDigits of them in all.
func (s *handSplitter) digits(text []byte, e int) int {
	for d := 1; d < s.maxDigits && e < len(text); d++ {
		c2, n2 := s.at(text, e)
		if c2&cNumber == 0 {
			break
		}
		e += n2
	}
	return e
}
