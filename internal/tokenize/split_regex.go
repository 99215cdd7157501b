package tokenize

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// possessive finds possessive quantifiers (a+ after *, +, ?, or }), which the general engine
// lacks.
var possessive = regexp.MustCompile(`[*+?}]\+`)

// regexSplitter runs any other pattern on github.com/dlclark/regexp2, a backtracking engine
// with look-around, like the references' engines. It is several times slower than the
// hand-written splitters, and its Unicode classes are Go's (Unicode 15.0.0), not the
// references' 16.0.0: text in scripts added in Unicode 16 may split differently.
type regexSplitter struct {
	re *regexp2.Regexp
}

func newRegexSplitter(pattern string) (*regexSplitter, error) {
	if possessive.MatchString(stripEscapes(pattern)) {
		return nil, fmt.Errorf("pattern %q: possessive quantifiers are supported only in the known patterns", pattern)
	}
	re, err := regexp2.Compile(pattern, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %w", pattern, err)
	}
	return &regexSplitter{re: re}, nil
}

// stripEscapes turns backslash escapes and \p{..} classes into an x, so that `\++` or `\p{L}+` is
// not taken for a possessive quantifier.
func stripEscapes(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '\\' {
			i++
			if i+1 < len(p) && (p[i] == 'p' || p[i] == 'P') && p[i+1] == '{' {
				if k := strings.IndexByte(p[i:], '}'); k > 0 {
					i += k
				}
			}
			b.WriteByte('x')
			continue
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

func (s *regexSplitter) split(ends []int, text []byte) []int {
	runes := make([]rune, 0, len(text))
	offs := make([]int, 0, len(text)+1)
	for i := 0; i < len(text); {
		r, n := utf8.DecodeRune(text[i:])
		runes = append(runes, r)
		offs = append(offs, i)
		i += n
	}
	offs = append(offs, len(text))
	at := 0
	m, err := s.re.FindRunesMatch(runes)
	for ; m != nil && err == nil; m, err = s.re.FindNextMatch(m) {
		if m.Length == 0 {
			continue
		}
		start, end := offs[m.Index], offs[m.Index+m.Length]
		if start > at {
			ends = append(ends, ^start)
		}
		ends = append(ends, end)
		at = end
	}
	if at < len(text) {
		ends = append(ends, ^len(text))
	}
	return ends
}
