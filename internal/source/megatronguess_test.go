package source

import "testing"

// TestGuessSequences: an index's sequence count follows from its size
// when each sequence is its own document (34 + 20N bytes, 34 + 21N with
// sequence modes), and is not guessed from any other size.
func TestGuessSequences(t *testing.T) {
	for _, c := range []struct {
		size, want uint64
		ok         bool
	}{
		{42 + 20*7, 7, true},
		{42 + 21*11, 11, true},
		{42 + 20*1_000_000_000, 1_000_000_000, true},
		{42 + 20*7 + 8, 0, false}, // a document of two sequences, or more indices
		{42, 0, false},
		{10, 0, false},
	} {
		got, ok := guessSequences(c.size)
		if got != c.want || ok != c.ok {
			t.Errorf("guessSequences(%d) = %d, %v; want %d, %v", c.size, got, ok, c.want, c.ok)
		}
	}
}
