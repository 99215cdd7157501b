package tokenize

import "unicode/utf8"

// replacement is U+FFFD REPLACEMENT CHARACTER in UTF-8.
const replacement = "\uFFFD"

// appendReplacingInvalid appends text to dst with each ill-formed sequence replaced by
// U+FFFD, one replacement per maximal subpart (Unicode's recommended practice, section 3.9),
// which is what Python's bytes.decode("utf-8", "replace") does. Hugging Face tokenizers only
// take Python or Rust strings, so this is the text they see when given raw bytes.
func appendReplacingInvalid(dst, text []byte) []byte {
	for i := 0; i < len(text); {
		c := text[i]
		if c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		if r, n := utf8.DecodeRune(text[i:]); r != utf8.RuneError || n > 1 {
			dst = append(dst, text[i:i+n]...)
			i += n
			continue
		}
		i += maximalSubpart(text[i:])
		dst = append(dst, replacement...)
	}
	return dst
}

// maximalSubpart returns the length of the ill-formed sequence at the start of b: the lead
// byte and the continuation bytes that could still begin a well-formed sequence with it
// (at least 1).
func maximalSubpart(b []byte) int {
	lo, hi, need := byte(0x80), byte(0xBF), 0
	switch c := b[0]; {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		lo, need = 0xA0, 2
	case c == 0xED:
		hi, need = 0x9F, 2
	case c >= 0xE1 && c <= 0xEF:
		need = 2
	case c == 0xF0:
		lo, need = 0x90, 3
	case c == 0xF4:
		hi, need = 0x8F, 3
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	default:
		return 1
	}
	n := 1
	for ; n <= need && n < len(b); n++ {
		if b[n] < lo || b[n] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
	}
	return n
}
