package tokenize

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// TestAppendNFC checks NFC against what Hugging Face tokenizers 0.23.3's
// normalizers.NFC().normalize_str gives for the same input: every expected string below
// was produced by running the reference on the input, and is written out literally.
func TestAppendNFC(t *testing.T) {
	acute, dotBelow := "\u0301", "\u0323"
	for _, tc := range []struct{ in, want string }{
		// No U+034F in runs of over 30 marks (x/text's Stream-Safe Text Format puts one in).
		{"e" + strings.Repeat(acute, 40) + "x", "\u00e9" + strings.Repeat(acute, 39) + "x"},
		// The dot below (class 220) sorts before the acutes (230) and composes with the a;
		// the acutes do not compose with U+1EA1.
		{"a" + strings.Repeat(acute, 35) + dotBelow, "\u1ea1" + strings.Repeat(acute, 35)},
		{strings.Repeat(acute, 33), strings.Repeat(acute, 33)},
		{"\u1100\u1161\u11a8 cafe\u0301", "\uac01 caf\u00e9"},
		{"\uac00\u11a8", "\uac01"},
		{"\uac01\u11a8", "\uac01\u11a8"},
		{"\u03a9" + strings.Repeat("\u0342", 31) + "\u03b9", "\u03a9" + strings.Repeat("\u0342", 31) + "\u03b9"},
		{"e\u0301\u0323", "\u1eb9\u0301"},
		{"\u00e9\u0323", "\u1eb9\u0301"},
		{"\u0b47\u0b3e", "\u0b4b"},
		{"\u0958", "\u0915\u093c"},
		{"\u212b", "\u00c5"},
		// Characters added after Unicode 9.0, which the reference's data does not have (and
		// golang.org/x/text's 15.0 data does): they are starters that compose with nothing.
		// U+0898 (class 230 since 14.0) stays before the dot below, which then has no a to
		// compose with; x/text gives "\u1ea1\u0898".
		{"a\u0898\u0323", "a\u0898\u0323"},
		// U+1E4EC (class 232 since 15.0); x/text gives "\u00e1\U0001E4EC".
		{"a\U0001E4EC\u0301", "a\U0001E4EC\u0301"},
		// U+1ABF (class 220 since 13.0) is a starter: the marks after it are ordered among
		// themselves and do not reach the a.
		{"a\u1abf\u0301\u0323", "a\u1abf\u0323\u0301"},
		// U+11938 = U+11935 U+11930 since 13.0; x/text composes the pair.
		{"\U00011935\U00011930", "\U00011935\U00011930"},
		{"\U00011938", "\U00011938"},
		// U+0897 (class 230 since 16.0) is a starter too.
		{"a\u0897\u0323", "a\u0897\u0323"},
		{"\u0897\u0323", "\u0897\u0323"},
		{"\u0d3b\u0d3c", "\u0d3b\u0d3c"},
	} {
		got := string(appendNFC(nil, []byte(tc.in)))
		if got != tc.want {
			t.Errorf("appendNFC(%+q) = %+q, want %+q", tc.in, got, tc.want)
		}
		if isNFC([]byte(tc.in)) != (tc.in == tc.want) {
			t.Errorf("isNFC(%+q) = %v", tc.in, !(tc.in == tc.want))
		}
	}
}

// TestNFCReference checks NFC on the strings of testdata/nfc_reference.txt, which
// scripts/tokenize_nfc_tables.py wrote with the reference's NFC of each: every character
// that NFC cares about alone, each composition pair with a mark before and after its second,
// and random strings of such characters.
func TestNFCReference(t *testing.T) {
	f, err := os.Open("testdata/nfc_reference.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	parse := func(field string) string {
		var sb strings.Builder
		for _, h := range strings.Fields(field) {
			r, err := strconv.ParseUint(h, 16, 32)
			if err != nil {
				t.Fatalf("bad code point %q", h)
			}
			sb.WriteRune(rune(r))
		}
		return sb.String()
	}
	sc := bufio.NewScanner(f)
	n, bad := 0, 0
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		in, want, ok := strings.Cut(line, ";")
		if !ok {
			t.Fatalf("bad line %q", line)
		}
		n++
		s, w := parse(in), parse(want)
		got := string(appendNFC([]byte("x"), []byte(s)))[1:]
		normal := isNFC([]byte(s))
		again := string(appendNFC(nil, []byte(w)))
		if got != w || (normal && s != w) || again != w {
			if bad++; bad <= 10 {
				t.Errorf("%s: appendNFC = %s, isNFC = %v; want %s", in, hexRunes(got), normal, want)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 1000 {
		t.Fatalf("only %d cases", n)
	}
	if bad > 0 {
		t.Errorf("%d of %d differ", bad, n)
	}
}

func hexRunes(s string) string {
	var parts []string
	for _, r := range s {
		parts = append(parts, fmt.Sprintf("%X", r))
	}
	return strings.Join(parts, " ")
}

// TestNFCTables checks what the code assumes of the tables, over all code points: below
// nfcFirst every character is a plain starter; a character that NFC keeps and that has a
// decomposition is a starter; and where the tables and golang.org/x/text (Unicode 15.0)
// disagree on a character, the tables know nothing of it (it was added after Unicode 9.0).
func TestNFCTables(t *testing.T) {
	seconds := map[rune]bool{}
	for _, c := range nfcCompositions {
		seconds[c[1]] = true
	}
	differ := 0
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if 0xD800 <= r && r <= 0xDFFF {
			continue
		}
		p := nfcLookup(r)
		if r < nfcFirst && (p != nfcProps{} || seconds[r]) {
			t.Errorf("U+%04X below nfcFirst is not a plain starter: %+v", r, p)
		}
		if p.flags&nfcDecomposes != 0 && p.flags&nfcExcluded == 0 && p.lead != 0 {
			t.Errorf("U+%04X: composite with a leading class %d", r, p.lead)
		}
		s := string(r)
		ours := string(appendNFC(nil, []byte(s)))
		var dec []rune
		for _, c := range appendDecomposed(nil, r) {
			dec = append(dec, c.r)
		}
		xp := norm.NFC.PropertiesString(s)
		if ours == norm.NFC.String(s) && string(dec) == norm.NFD.String(s) && p.lead == xp.LeadCCC() && p.trail == xp.TrailCCC() {
			continue
		}
		differ++
		if p != (nfcProps{}) {
			t.Errorf("U+%04X: the tables (%+v, NFC %+q) and x/text (classes %d %d, NFC %+q) disagree",
				r, p, ours, xp.LeadCCC(), xp.TrailCCC(), norm.NFC.String(s))
		}
	}
	t.Logf("%d code points where the reference's NFC data and x/text's differ", differ)
}

// TestNFCRandom compares appendNFC and isNFC with golang.org/x/text on random strings of
// characters that the two agree on (assigned by Unicode 9.0), with runs of at most 30 marks.
// isNFC may say false of NFC text (see nfcSpan), never true of other text.
func TestNFCRandom(t *testing.T) {
	var pool []rune
	for r := rune(nfcFirst); r <= utf8.MaxRune; r++ {
		p := nfcLookup(r)
		if p == (nfcProps{}) && !(0xAC00 <= r && r < 0xAC00+hangulSCount && r%7 == 0) {
			continue
		}
		pool = append(pool, r)
	}
	for _, c := range nfcCompositions {
		pool = append(pool, c[0])
	}
	pool = append(pool, 'a', 0x1100, 0x1101)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		rs := make([]rune, 1+rng.IntN(8))
		for j := range rs {
			rs[j] = pool[rng.IntN(len(pool))]
		}
		s := []byte(string(rs))
		want := norm.NFC.Bytes(s)
		if got := appendNFC(nil, s); string(got) != string(want) {
			t.Fatalf("appendNFC(%s) = %s, x/text %s", hexRunes(string(s)), hexRunes(string(got)), hexRunes(string(want)))
		}
		if isNFC(s) && !norm.NFC.IsNormal(s) {
			t.Fatalf("isNFC(%s) = true, x/text false", hexRunes(string(s)))
		}
	}
}
