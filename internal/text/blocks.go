package text

import (
	"crypto/sha256"

	"github.com/dataloaderd/dataloaderd/internal/mapped"
)

// DocumentHashes is the SHA-256 of each document's text in unit u, in the
// unit's order (the text as the record holds it, UTF-8, before
// tokenizing; bad records skipped as a read skips them): what a blocklist
// names a text document by. It reads the unit's text; it tokenizes
// nothing.
func (t *Tokens) DocumentHashes(u uint64) ([][sha256.Size]byte, error) {
	var out [][sha256.Size]byte
	err := t.docs(u, func(text []byte) error {
		out = append(out, sha256.Sum256(text))
		return nil
	})
	return out, err
}

// DocumentSpans is where each document of unit u lies in the unit's
// tokens: [start, end), its BOS and EOS included, in the unit's order, as
// the unit is tokenized. It tokenizes the unit's documents again (the
// cache keeps a unit's tokens, not their documents): for the few units a
// blocklist finds a document in.
func (t *Tokens) DocumentSpans(u uint64) ([][2]uint64, error) {
	var out [][2]uint64
	var scratch []int32
	var at uint64
	err := t.docs(u, func(text []byte) error {
		n := uint64(0)
		if t.frame.HasBOS {
			n++
		}
		scratch = t.enc.Encode(scratch[:0], text)
		n += uint64(len(scratch))
		if len(scratch) == 0 || scratch[len(scratch)-1] != t.frame.EOS {
			n++
		}
		out = append(out, [2]uint64{at, at + n})
		at += n
		return nil
	})
	return out, err
}

// docs visits the documents of unit u as tokenizing does: under the
// dataset's life, a file cut short an error naming it.
func (t *Tokens) docs(u uint64, visit func([]byte) error) error {
	return mapped.Guard(func() error {
		t.life.RLock()
		defer t.life.RUnlock()
		if t.closed {
			return errClosed
		}
		return t.ds.Docs(u, visit)
	})
}
