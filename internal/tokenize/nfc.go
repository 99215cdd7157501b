package tokenize

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"unicode/utf8"
)

// NFC, as Hugging Face tokenizers' NFC normalizer does it. That normalizer has Unicode 9.0.0
// data (golang.org/x/text has 15.0.0: it orders and composes marks added since, which the
// reference leaves as they are), so the package has its own: the tables in nfc_tables.go,
// probed from the reference by scripts/tokenize_nfc_tables.py, and Unicode's algorithm
// (canonical decomposition, canonical ordering, canonical composition) without the
// Stream-Safe Text Format's U+034F, which the reference does not insert either.
//
// Text is split into segments: a segment starts at a character before which nothing can
// change (a starter that composes with nothing before it) and holds the characters up to the
// next such one. NFC of text is NFC of each segment. nfcSpan finds, in one pass, how much of
// the text is already in NFC; only the segments after that are normalized.

// Hangul syllables and jamo (Unicode's chapter 3.12).
const (
	hangulSBase  = 0xAC00
	hangulLBase  = 0x1100
	hangulVBase  = 0x1161
	hangulTBase  = 0x11A7
	hangulLCount = 19
	hangulVCount = 21
	hangulTCount = 28
	hangulNCount = hangulVCount * hangulTCount
	hangulSCount = hangulLCount * hangulNCount
)

// nfcFirst is the first code point that is not a plain starter: every character below it has
// class 0, no decomposition, and composes with nothing before it (TestNFCTables).
const nfcFirst = 0xC0

// Flags of nfcProps.
const (
	nfcExcluded   = 1 << iota // never in NFC: it decomposes and is not composed back
	nfcBack                   // the second of a composition pair: may compose with what precedes it
	nfcInside                 // no segment boundary before it
	nfcDecomposes             // has a decomposition in nfcDecomp
)

// nfcProps is what NFC needs to know of a character. A character without a decomposition has
// its class as lead and trail; one with a decomposition has the classes of the decomposition's
// first and last characters. The zero value is a plain starter.
type nfcProps struct {
	lead, trail, flags uint8
}

var (
	nfcBlockOf [0x110000 >> 8]uint8 // per block of 256 code points, its row of nfcRows
	nfcRows    []uint8              // rows of 256 indices into nfcPropSet; row 0 is all plain
	nfcPropSet []nfcProps           // the distinct properties; index 0 is the zero value
	nfcDecomp  map[rune]string      // full canonical decompositions, Hangul syllables excepted
	nfcPairs   map[uint64]rune      // composite by first<<21 | second, Hangul excepted
)

func init() { buildNFC() }

// buildNFC makes the lookup tables from the generated lists.
func buildNFC() { packNFC(nfcPropsOf()) }

// nfcPropsOf is every code point's NFC properties, from the generated
// lists; it also fills nfcDecomp and nfcPairs.
func nfcPropsOf() map[rune]nfcProps {
	props := make(map[rune]nfcProps)
	class := make(map[rune]uint8)
	for _, run := range nfcClassRuns {
		for r := run.first; r <= run.last; r++ {
			class[r] = run.class
			props[r] = nfcProps{lead: run.class, trail: run.class, flags: nfcInside}
		}
	}
	nfcDecomp = make(map[rune]string, len(nfcDecompositions))
	for _, d := range nfcDecompositions {
		nfcDecomp[d.r] = d.nfd
		first, _ := utf8.DecodeRuneInString(d.nfd)
		last, _ := utf8.DecodeLastRuneInString(d.nfd)
		p := nfcProps{lead: class[first], trail: class[last], flags: nfcDecomposes}
		if d.excluded {
			p.flags |= nfcExcluded
		}
		props[d.r] = p
	}
	nfcPairs = make(map[uint64]rune, len(nfcCompositions))
	back := func(r rune) {
		p := props[r]
		p.flags |= nfcBack | nfcInside
		props[r] = p
	}
	for _, c := range nfcCompositions {
		nfcPairs[uint64(c[0])<<21|uint64(c[1])] = c[2]
		back(c[1])
	}
	for v := rune(0); v < hangulVCount; v++ {
		back(hangulVBase + v)
	}
	for t := rune(1); t < hangulTCount; t++ {
		back(hangulTBase + t)
	}
	// A segment boundary is before a starter that nothing before it can combine with, even
	// once decomposed.
	for r, p := range props {
		first, _ := utf8.DecodeRuneInString(nfcDecomp[r])
		if p.lead != 0 || (p.flags&nfcDecomposes != 0 && props[first].flags&nfcBack != 0) {
			p.flags |= nfcInside
			props[r] = p
		}
	}
	return props
}

// packNFC packs props into two levels of tables: a row of 256 indices per
// block of code points, shared by equal blocks, into the distinct
// properties.
func packNFC(props map[rune]nfcProps) {
	index := map[nfcProps]uint8{{}: 0}
	nfcPropSet = []nfcProps{{}}
	blocks := make(map[rune]*[256]uint8)
	for r, p := range props {
		if p == (nfcProps{}) {
			continue
		}
		i, ok := index[p]
		if !ok {
			if len(nfcPropSet) > 255 {
				panic("tokenize: more than 255 distinct NFC properties")
			}
			i = uint8(len(nfcPropSet))
			index[p] = i
			nfcPropSet = append(nfcPropSet, p)
		}
		b := blocks[r>>8]
		if b == nil {
			b = new([256]uint8)
			blocks[r>>8] = b
		}
		b[r&0xFF] = i
	}
	nfcRows = make([]uint8, 256)
	rows := map[[256]uint8]uint8{{}: 0}
	for _, hi := range slices.Sorted(maps.Keys(blocks)) {
		b := *blocks[hi]
		row, ok := rows[b]
		if !ok {
			if len(rows) > 255 {
				panic(fmt.Sprintf("tokenize: more than 255 distinct NFC blocks (%d)", len(rows)))
			}
			row = uint8(len(rows))
			rows[b] = row
			nfcRows = append(nfcRows, b[:]...)
		}
		nfcBlockOf[hi] = row
	}
}

// nfcLookup returns the properties of r.
func nfcLookup(r rune) nfcProps {
	return nfcPropSet[nfcRows[int(nfcBlockOf[r>>8])<<8|int(r&0xFF)]]
}

// nfcCompose returns the primary composite of a followed by b, if there is one.
func nfcCompose(a, b rune) (rune, bool) {
	if l := a - hangulLBase; 0 <= l && l < hangulLCount {
		if v := b - hangulVBase; 0 <= v && v < hangulVCount {
			return hangulSBase + (l*hangulVCount+v)*hangulTCount, true
		}
	} else if s := a - hangulSBase; 0 <= s && s < hangulSCount && s%hangulTCount == 0 {
		if t := b - hangulTBase; 0 < t && t < hangulTCount {
			return a + t, true
		}
	}
	c, ok := nfcPairs[uint64(a)<<21|uint64(b)]
	return c, ok
}

// isNFC reports whether valid UTF-8 text is certainly in NFC (see nfcSpan).
func isNFC(text []byte) bool { return nfcSpan(text) == len(text) }

// nfcSpan returns the length of a start of valid UTF-8 text that is in NFC and ends at a
// segment boundary: len(text) when all of it is in NFC, otherwise the start of the first
// segment that NFC may change. It checks, character by character, what NFC would change: a
// character that never occurs in NFC, marks out of canonical order, and a character that
// composes with the last starter before it. The order is checked on the decomposed text (a
// composite's last mark against the next character's first), so a rare segment that NFC
// gives back unchanged (U+1EAA U+1E8D6: the mark of class 220 sorts before the composite's
// marks, which compose back) counts as one it may change.
func nfcSpan(text []byte) int {
	seg := 0            // where the current segment starts
	starter := rune(-1) // the segment's last starter, -1 for none
	var mark uint8      // the class of the last mark after the starter, 0 for none
	var trail uint8     // the trailing class of the previous character
	for i := 0; i < len(text); {
		if text[i] < utf8.RuneSelf {
			// A run of ASCII: plain starters, each a boundary; the state is the last one's.
			j := i + 1
			for j+8 <= len(text) && binary.LittleEndian.Uint64(text[j:])&0x8080808080808080 == 0 {
				j += 8
			}
			for j < len(text) && text[j] < utf8.RuneSelf {
				j++
			}
			seg, starter, mark, trail = j-1, rune(text[j-1]), 0, 0
			i = j
			continue
		}
		r, size := utf8.DecodeRune(text[i:])
		var p nfcProps
		if r >= nfcFirst {
			p = nfcLookup(r)
		}
		if p.flags&nfcInside == 0 {
			seg, starter, mark, trail = i, -1, 0, 0
		}
		if p.flags&nfcExcluded != 0 || (p.lead != 0 && trail > p.lead) {
			return seg
		}
		if p.flags&nfcBack != 0 && starter >= 0 && (mark == 0 || (p.lead != 0 && mark < p.lead)) {
			if _, ok := nfcCompose(starter, r); ok {
				return seg
			}
		}
		if p.lead == 0 {
			starter, mark = r, 0
		} else {
			mark = p.lead
		}
		trail = p.trail
		i += size
	}
	return len(text)
}

// appendNFC appends the NFC form of valid UTF-8 text to dst: the parts already in NFC as
// they are, each other segment decomposed, ordered and composed.
func appendNFC(dst, text []byte) []byte {
	for {
		n := nfcSpan(text)
		dst = append(dst, text[:n]...)
		if n == len(text) {
			return dst
		}
		text = text[n:]
		n = nfcSegmentEnd(text)
		dst = appendNFCSegment(dst, text[:n])
		text = text[n:]
	}
}

// nfcSegmentEnd returns the length of the segment that text starts with.
func nfcSegmentEnd(text []byte) int {
	_, n := utf8.DecodeRune(text)
	for n < len(text) && text[n] >= utf8.RuneSelf {
		r, size := utf8.DecodeRune(text[n:])
		if r < nfcFirst || nfcLookup(r).flags&nfcInside == 0 {
			break
		}
		n += size
	}
	return n
}

// nfcChar is a character of a decomposed segment and its class.
type nfcChar struct {
	r     rune
	class uint8
}

// appendNFCSegment appends NFC of one segment by the book: full canonical decomposition,
// stable ordering of each run of marks by class, then canonical composition, where a
// character composes with the last starter unless a character between them (that did not
// compose) has class 0 or a class at least its own.
func appendNFCSegment(dst, seg []byte) []byte {
	var buf [32]nfcChar
	cs := buf[:0]
	for _, r := range string(seg) {
		cs = appendDecomposed(cs, r)
	}
	for i := 0; i < len(cs); {
		if cs[i].class == 0 {
			i++
			continue
		}
		j := i + 1
		for j < len(cs) && cs[j].class != 0 {
			j++
		}
		if j-i > 1 {
			slices.SortStableFunc(cs[i:j], func(a, b nfcChar) int { return int(a.class) - int(b.class) })
		}
		i = j
	}
	out := cs[:0]
	starter := -1 // index of the last starter in out
	for _, c := range cs {
		if starter >= 0 && (len(out)-1 == starter || (c.class != 0 && out[len(out)-1].class < c.class)) {
			if r, ok := nfcCompose(out[starter].r, c.r); ok {
				out[starter].r = r
				continue
			}
		}
		if c.class == 0 {
			starter = len(out)
		}
		out = append(out, c)
	}
	for _, c := range out {
		dst = utf8.AppendRune(dst, c.r)
	}
	return dst
}

// appendDecomposed appends the full canonical decomposition of r, with classes.
func appendDecomposed(cs []nfcChar, r rune) []nfcChar {
	if s := r - hangulSBase; 0 <= s && s < hangulSCount {
		cs = append(cs, nfcChar{hangulLBase + s/hangulNCount, 0}, nfcChar{hangulVBase + s%hangulNCount/hangulTCount, 0})
		if t := s % hangulTCount; t != 0 {
			cs = append(cs, nfcChar{hangulTBase + t, 0})
		}
		return cs
	}
	p := nfcLookup(r)
	if p.flags&nfcDecomposes == 0 {
		return append(cs, nfcChar{r, p.lead})
	}
	for _, d := range nfcDecomp[r] {
		cs = append(cs, nfcChar{d, nfcLookup(d).lead})
	}
	return cs
}
