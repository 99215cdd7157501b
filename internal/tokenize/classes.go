package tokenize

import (
	"sync"
	"unicode/utf8"
)

// Character classes used by the pre-tokenizer patterns, one bit each.
const (
	cLetter  uint8 = 1 << iota // \p{L}
	cNumber                    // \p{N}
	cSpace                     // \s
	cUpper                     // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] (o200k)
	cLower                     // [\p{Ll}\p{Lm}\p{Lo}\p{M}] (o200k)
	cMark                      // \p{M}
	cNewline                   // [\r\n]
)

// blockBits is the size, as a power of two, of the blocks the class table shares.
const blockBits = 7

// classTable maps every code point to its class bits through a two-level table: an index
// of blocks of 128 code points, identical blocks stored once. It is built once, on first
// use, from refTables, and is read-only afterwards.
type classTable struct {
	index  []uint16
	blocks []uint8
}

var (
	classesOnce sync.Once
	classes     classTable
)

// loadClasses returns the shared class table, building it on the first call.
func loadClasses() *classTable {
	classesOnce.Do(func() { classes = buildClasses(refTables) })
	return &classes
}

func buildClasses(tables map[string][][2]rune) classTable {
	flat := make([]uint8, utf8.MaxRune+1)
	set := func(name string, bit uint8) {
		for _, r := range tables[name] {
			for c := r[0]; c <= r[1]; c++ {
				flat[c] |= bit
			}
		}
	}
	set("L", cLetter)
	set("N", cNumber)
	set("Space", cSpace)
	set("M", cMark)
	for _, n := range []string{"Lu", "Lt", "Lm", "Lo", "M"} {
		set(n, cUpper)
	}
	for _, n := range []string{"Ll", "Lm", "Lo", "M"} {
		set(n, cLower)
	}
	flat['\r'] |= cNewline
	flat['\n'] |= cNewline

	const size = 1 << blockBits
	t := classTable{index: make([]uint16, len(flat)/size)}
	seen := map[string]uint16{}
	for b := range t.index {
		blk := flat[b*size : (b+1)*size]
		k := string(blk)
		id, ok := seen[k]
		if !ok {
			id = uint16(len(t.blocks) / size)
			seen[k] = id
			t.blocks = append(t.blocks, blk...)
		}
		t.index[b] = id
	}
	return t
}

// of returns the class bits of r; a rune outside Unicode has none.
func (t *classTable) of(r rune) uint8 {
	if uint32(r) > utf8.MaxRune {
		return 0
	}
	return t.blocks[int(t.index[r>>blockBits])<<blockBits|int(r&(1<<blockBits-1))]
}

// at decodes the rune at text[i] (valid UTF-8) and returns its class bits and length.
func (t *classTable) at(text []byte, i int) (uint8, int) {
	if c := text[i]; c < utf8.RuneSelf {
		return t.blocks[int(t.index[0])<<blockBits|int(c)], 1
	}
	r, n := utf8.DecodeRune(text[i:])
	return t.of(r), n
}
