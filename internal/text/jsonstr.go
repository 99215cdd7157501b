package text

import (
	"errors"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// unquote decodes a JSON string literal (already checked as JSON by the
// caller) strictly: where encoding/json would silently replace invalid UTF-8
// bytes or lone surrogate escapes with U+FFFD, unquote fails, so text that is
// not UTF-8 is reported instead of trained on.
func unquote(raw []byte) ([]byte, error) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return nil, errors.New("is not a JSON string")
	}
	s := raw[1 : len(raw)-1]
	if !utf8.Valid(s) {
		return nil, fmt.Errorf("is not valid UTF-8 (invalid byte at offset %d of the string)", firstInvalid(s))
	}
	// Fast path: nothing escaped.
	esc := -1
	for i, c := range s {
		if c == '\\' {
			esc = i
			break
		}
	}
	if esc < 0 {
		return s, nil
	}
	out := make([]byte, 0, len(s))
	out = append(out, s[:esc]...)
	for i := esc; i < len(s); {
		c := s[i]
		if c != '\\' {
			out = append(out, c)
			i++
			continue
		}
		if i+1 >= len(s) {
			return nil, errors.New("is a malformed string (trailing backslash)")
		}
		switch e := s[i+1]; e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(s[i+2:])
			if !ok {
				return nil, errors.New("is a malformed string (bad \\u escape)")
			}
			i += 6
			if utf16.IsSurrogate(r) {
				r2, ok := rune(0), false
				if i+1 < len(s) && s[i] == '\\' && s[i+1] == 'u' {
					r2, ok = hex4(s[i+2:])
				}
				pair := utf16.DecodeRune(r, r2)
				if !ok || pair == utf8.RuneError {
					return nil, fmt.Errorf("is not valid UTF-8 (lone surrogate \\u%04x)", r)
				}
				r = pair
				i += 6
			}
			out = utf8.AppendRune(out, r)
			continue
		default:
			return nil, fmt.Errorf("is a malformed string (escape \\%c)", e)
		}
		i += 2
	}
	return out, nil
}

// hex4 parses the four hex digits at the start of s.
func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// firstInvalid returns the offset of the first byte of s that is not valid UTF-8.
func firstInvalid(s []byte) int {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}
