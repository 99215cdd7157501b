package tokenize

import (
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// TestAppendNFC: segments of more than 30 marks are composed and ordered as
// NFC defines it, without the U+034F that x/text's stream-safe form puts in;
// everything else is x/text's NFC.
func TestAppendNFC(t *testing.T) {
	acute, dotBelow := "\u0301", "\u0323"
	for _, tc := range []struct{ in, want string }{
		{"e" + strings.Repeat(acute, 40) + "x", "\u00e9" + strings.Repeat(acute, 39) + "x"},
		// The dot below (class 220) sorts before the acutes (230) and
		// composes with the a; the acutes do not compose with U+1EA1.
		{"a" + strings.Repeat(acute, 35) + dotBelow, "\u1ea1" + strings.Repeat(acute, 35)},
		{strings.Repeat(acute, 33), strings.Repeat(acute, 33)},
		{"\u1100\u1161\u11a8 cafe\u0301", norm.NFC.String("\u1100\u1161\u11a8 cafe\u0301")},
		{"Ω" + strings.Repeat("\u0342", 31) + "ι", norm.NFC.String("Ω\u0342") + strings.Repeat("\u0342", 30) + "ι"},
	} {
		got := string(appendNFC(nil, []byte(tc.in)))
		if got != tc.want {
			t.Errorf("appendNFC(%+q) = %+q, want %+q", tc.in, got, tc.want)
		}
		if strings.ContainsRune(got, '\u034f') {
			t.Errorf("appendNFC(%+q) inserted U+034F", tc.in)
		}
	}
}
