package tokenize

import (
	"unicode/utf8"
)

// Encoder encodes text for one goroutine at a time. It shares the Tokenizer's read-only
// tables and owns a piece cache and scratch space, so that encoding allocates nothing per
// piece once the cache is warm. Encoders are cheap to make; make one per worker.
type Encoder struct {
	t       *Tokenizer
	cache   *pieceCache
	special *specialMatcher
	s       scratch
}

// Encode appends the token ids of text to dst and returns the extended slice. Text may hold
// any bytes: see the package documentation for invalid UTF-8.
func (e *Encoder) Encode(dst []int32, text []byte) []int32 {
	if e.special == nil {
		return e.encodeOrdinary(dst, text)
	}
	for len(text) > 0 {
		at, n, id := e.special.find(text)
		if at < 0 {
			break
		}
		dst = e.encodeOrdinary(dst, text[:at])
		dst = append(dst, id)
		text = text[at+n:]
	}
	return e.encodeOrdinary(dst, text)
}

// encodeOrdinary encodes text that holds no special token.
func (e *Encoder) encodeOrdinary(dst []int32, text []byte) []int32 {
	t := e.t
	if len(text) == 0 {
		return dst
	}
	if !t.hf {
		if utf8.Valid(text) {
			dst, _ = e.encodeValid(dst, text)
			return dst
		}
		return e.encodeInvalid(dst, text)
	}
	if !utf8.Valid(text) {
		e.s.norm = appendReplacingInvalid(e.s.norm[:0], text)
		text = e.s.norm
	}
	if t.nfc {
		if n := nfcSpan(text); n < len(text) {
			buf := appendNFC(append(e.s.buf[:0], text[:n]...), text[n:])
			e.s.buf = buf
			text = buf
		}
	}
	if t.steps != nil {
		return e.encodeSteps(dst, text, 0)
	}
	dst, _ = e.encodeValid(dst, text)
	return dst
}

// encodeValid encodes valid UTF-8 with the simple pre-tokenizer. It also returns where in
// dst the tokens of the last piece start.
func (e *Encoder) encodeValid(dst []int32, text []byte) ([]int32, int) {
	last := len(dst)
	if h := e.t.hand; h != nil {
		for i := 0; i < len(text); {
			j := h.next(text, i)
			last = len(dst)
			dst = e.piece(dst, text[i:j])
			i = j
		}
		return dst, last
	}
	ends := e.t.split.split(e.s.ends[:0], text)
	e.s.ends = ends
	at := 0
	for _, end := range ends {
		if end < 0 { // a gap: Hugging Face keeps it as a piece, tiktoken drops it
			end = ^end
			if !e.t.hf {
				at = end
				continue
			}
		}
		last = len(dst)
		dst = e.piece(dst, text[at:end])
		at = end
	}
	return dst, last
}

// encodeSteps runs the Hugging Face pre-tokenizer steps from k on one piece of valid UTF-8.
func (e *Encoder) encodeSteps(dst []int32, text []byte, k int) []int32 {
	if len(text) == 0 {
		return dst
	}
	if k == len(e.t.steps) {
		return e.piece(dst, text)
	}
	st := e.t.steps[k]
	if st.prefixSpace && text[0] != ' ' {
		text = append([]byte{' '}, text...)
	}
	if st.split == nil {
		return e.encodeSteps(dst, text, k+1)
	}
	at := 0
	for _, end := range st.split.split(nil, text) {
		if end < 0 {
			end = ^end
		}
		dst = e.encodeSteps(dst, text[at:end], k+1)
		at = end
	}
	return dst
}

// piece appends the tokens of one pre-tokenizer piece.
func (e *Encoder) piece(dst []int32, p []byte) []int32 {
	t := e.t
	if len(p) == 1 {
		return append(dst, t.byteTok[p[0]])
	}
	toks, h := e.cache.get(p)
	if toks != nil {
		return append(dst, toks...)
	}
	start := len(dst)
	if id, ok := t.vocab[string(p)]; t.direct && ok {
		dst = append(dst, id)
	} else {
		dst = t.bpe(dst, p, &e.s)
	}
	e.cache.put(p, h, dst[start:])
	return dst
}

// encodeInvalid encodes text that is not valid UTF-8 the way tiktoken's _encode_bytes does:
// the valid prefix is split and encoded as usual; then the tokens of its last piece (grown
// backwards over tokens made only of ' ', '\n' and '\t') are turned back into bytes, joined
// with all the bytes from the first invalid one to the end, and that whole run is encoded as
// one piece, without splitting.
func (e *Encoder) encodeInvalid(dst []int32, text []byte) []int32 {
	t := e.t
	v := validPrefix(text)
	base := len(dst)
	dst, last := e.encodeValid(dst, text[:v])
	if last < len(dst) && t.allSpace(dst[last]) {
		for last > base && t.allSpace(dst[last-1]) {
			last--
		}
	}
	rest := e.s.buf[:0]
	for _, id := range dst[last:] {
		rest = append(rest, t.tokens[id]...)
	}
	rest = append(rest, text[v:]...)
	e.s.buf = rest
	dst = dst[:last]
	if id, ok := t.vocab[string(rest)]; ok {
		return append(dst, id)
	}
	if len(rest) == 1 {
		return append(dst, t.byteTok[rest[0]])
	}
	return t.bpe(dst, rest, &e.s)
}

// allSpace reports whether token id is made only of ' ', '\n' and '\t'.
func (t *Tokenizer) allSpace(id int32) bool {
	for _, b := range t.tokens[id] {
		if b != ' ' && b != '\n' && b != '\t' {
			return false
		}
	}
	return true
}

// validPrefix returns the length of the longest valid UTF-8 prefix of text.
func validPrefix(text []byte) int {
	i := 0
	for i < len(text) {
		if text[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(text[i:])
		if r == utf8.RuneError && n == 1 {
			break
		}
		i += n
	}
	return i
}
