package tokenize

import (
	"slices"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// maxSegmentMarks is where golang.org/x/text's NFC starts inserting U+034F
// (Unicode's Stream-Safe Text Format): after 30 non-starters in a row.
const maxSegmentMarks = 30

// appendNFC appends the NFC form of valid UTF-8 text to dst as Unicode's
// canonical composition defines it. Segments (a starter and the marks that
// follow it) of up to 30 marks go through x/text; longer ones are decomposed,
// put in canonical order and composed here, because x/text would insert
// U+034F into them and Hugging Face's NFC does not.
func appendNFC(dst, text []byte) []byte {
	for len(text) > 0 {
		n, marks := segment(text)
		if marks <= maxSegmentMarks {
			dst = norm.NFC.Append(dst, text[:n]...)
		} else {
			dst = composeSegment(dst, text[:n])
		}
		text = text[n:]
	}
	return dst
}

// segment returns the length of the NFC segment text starts with (up to the
// next rune with a boundary before it) and how many non-starters it holds.
func segment(text []byte) (n, marks int) {
	for i := 0; i < len(text); {
		p := norm.NFC.Properties(text[i:])
		if i > 0 && p.BoundaryBefore() {
			return i, marks
		}
		if p.CCC() != 0 {
			marks++
		}
		size := p.Size()
		if size == 0 {
			size = 1
		}
		i += size
	}
	return len(text), marks
}

// composeSegment is NFC of one segment by the book: full canonical
// decomposition, stable ordering of marks by combining class, then
// canonical composition, where a mark composes with the last starter unless
// a character between them has a class of 0 or at least its own.
func composeSegment(dst, seg []byte) []byte {
	var rs []rune
	for _, r := range string(seg) {
		for _, d := range norm.NFD.String(string(r)) {
			rs = append(rs, d)
		}
	}
	ccc := func(r rune) uint8 { return norm.NFC.PropertiesString(string(r)).CCC() }
	for i := 0; i < len(rs); {
		j := i
		for j < len(rs) && ccc(rs[j]) != 0 {
			j++
		}
		if j > i {
			slices.SortStableFunc(rs[i:j], func(a, b rune) int { return int(ccc(a)) - int(ccc(b)) })
			i = j
		} else {
			i++
		}
	}
	out := rs[:0:0]
	starter, last := -1, -1 // index of the last starter in out; class of the last character after it (-1: none)
	for _, r := range rs {
		c := int(ccc(r))
		if starter >= 0 && (last == -1 || (c != 0 && last < c)) {
			if composite, ok := composePair(out[starter], r); ok {
				out[starter] = composite
				continue
			}
		}
		if c == 0 {
			starter, last = len(out), -1
		} else {
			last = c
		}
		out = append(out, r)
	}
	for _, r := range out {
		dst = utf8.AppendRune(dst, r)
	}
	return dst
}

// composePair is the primary composite of a followed by b, if there is one.
func composePair(a, b rune) (rune, bool) {
	s := norm.NFC.String(string([]rune{a, b}))
	if r, size := utf8.DecodeRuneInString(s); size == len(s) && r != utf8.RuneError {
		return r, true
	}
	return 0, false
}
