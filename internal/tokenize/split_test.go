package tokenize

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode"
)

func pieces(s splitter, text string) []string {
	var out []string
	at := 0
	for _, end := range s.split(nil, []byte(text)) {
		if end < 0 {
			end = ^end
		}
		out = append(out, text[at:end])
		at = end
	}
	return out
}

const (
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	gpt2Pattern   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

// TestSplitHand checks the hand-written splitters on cases worked out from the patterns.
func TestSplitHand(t *testing.T) {
	for _, c := range []struct {
		pattern, text string
		want          []string
	}{
		{r50kPattern, "Hello  world", []string{"Hello", " ", " world"}},
		{r50kPattern, "it's 12345!!", []string{"it", "'s", " 12345", "!!"}},
		{r50kPattern, "IT'S", []string{"IT", "'", "S"}}, // case-sensitive contractions
		{r50kPattern, "a \t\n", []string{"a", " \t\n"}},
		{cl100kPattern, "IT'S ſ'ſ", []string{"IT", "'S", " ſ", "'ſ"}},
		{cl100kPattern, "12345 x", []string{"123", "45", " x"}},
		{cl100kPattern, "a\n  ", []string{"a", "\n  "}},     // \s++$ first
		{llama3Pattern, "a\n  ", []string{"a", "\n", "  "}}, // the original pattern
		{cl100kPattern, "x  \n\n y", []string{"x", "  \n\n", " y"}},
		{cl100kPattern, ".hello ...\r\n", []string{".hello", " ...\r\n"}},
		{o200kPattern, "HelloWorld HELLOworld HELLO x", []string{"Hello", "World", " HELLOworld", " HELLO", " x"}},
		{o200kPattern, "don't a/b//\nc", []string{"don't", " a", "/b", "//\n", "c"}},
		{o200kPattern, "\u0301x", []string{"\u0301x"}}, // a mark leads a word
	} {
		s, err := splitterFor(c.pattern)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := s.(*handSplitter); !ok {
			t.Fatalf("pattern %q did not get a hand-written splitter", c.pattern)
		}
		if got := pieces(s, c.text); !slices.Equal(got, c.want) {
			t.Errorf("%.20s…: split(%q) = %q, want %q", c.pattern, c.text, got, c.want)
		}
	}
}

// TestSplitHandMatchesRegex runs the general regex engine and the hand-written splitters
// over random text and wants the same pieces. The text uses characters whose classes did
// not change between Go's Unicode tables and the references'.
func TestSplitHandMatchesRegex(t *testing.T) {
	alphabet := []rune("aZ09 \t\r\n'sStTlLd.,/-_\u00a0\u3000é\u0301\u01c5\u02b0中ǅ١\U0001F600!")
	rng := rand.New(rand.NewPCG(1, 2))
	for _, pattern := range []string{gpt2Pattern, llama3Pattern, strings.Replace(llama3Pattern, `\p{N}{1,3}`, `\p{N}`, 1), o200kPattern} {
		hand, _ := splitterFor(pattern)
		re, err := newRegexSplitter(pattern)
		if err != nil {
			t.Fatal(err)
		}
		for range 2000 {
			var b strings.Builder
			for range rng.IntN(24) {
				b.WriteRune(alphabet[rng.IntN(len(alphabet))])
			}
			text := b.String()
			if got, want := pieces(hand, text), pieces(re, text); !slices.Equal(got, want) {
				t.Fatalf("%.20s…: hand %q, regex %q", pattern, got, want)
			}
		}
	}
}

// TestClassesCoverGo checks that the reference tables are a superset of Go's for the
// classes the patterns use: they differ only by the characters added in Unicode 16.
func TestClassesCoverGo(t *testing.T) {
	ct := loadClasses()
	for r := rune(0); r <= unicode.MaxRune; r++ {
		c := ct.of(r)
		if unicode.IsLetter(r) && c&cLetter == 0 || unicode.IsNumber(r) && c&cNumber == 0 ||
			unicode.IsSpace(r) != (c&cSpace != 0) || unicode.IsMark(r) && c&cMark == 0 {
			t.Fatalf("U+%04X: class bits %08b disagree with Go's unicode package", r, c)
		}
	}
}
