package testcorpus

import (
	"strconv"
	"strings"
)

// Ints is a tokenizer for tests: "17 18 19" is [17 18 19]. With documents of
// unique numbers (UniqueDocs written as text), every served token names the
// one place it came from.
type Ints struct{}

// Encode appends the numbers of text to dst; it panics on a word that is
// not a number, which only a broken test writes.
func (Ints) Encode(dst []int32, text []byte) []int32 {
	for _, f := range strings.Fields(string(text)) {
		v, err := strconv.Atoi(f)
		if err != nil {
			panic(err)
		}
		dst = append(dst, int32(v))
	}
	return dst
}
