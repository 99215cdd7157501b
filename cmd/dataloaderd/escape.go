package main

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// shown is text from a file (a dataset's name, its format, a path) as a
// terminal may print it: as it is when every rune is printable, else
// quoted with Go's escapes, so that an escape sequence in a checkpoint
// cannot retitle, recolour or rewrite the operator's terminal.
func shown(s string) string {
	if printable(s) {
		return s
	}
	return strconv.Quote(s)
}

func printable(s string) bool {
	return utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0
}

// escaped writes every rune of s that is not printable, and every byte
// that is not UTF-8, as its Go escape (\x1b, \u200b), unquoted: for
// messages that quote some of what they hold already.
func escaped(s string) string {
	if printable(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsPrint(r):
			b.WriteString(s[i : i+n])
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}

// escapedError is err with its text escaped; it unwraps to err.
type escapedError struct{ err error }

func (e escapedError) Error() string { return escaped(e.err.Error()) }
func (e escapedError) Unwrap() error { return e.err }
