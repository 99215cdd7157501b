// Package tokenize is a byte-level BPE tokenizer whose output is, token for token, that of
// the reference implementations: tiktoken for the built-in encodings and for tiktoken rank
// files, Hugging Face tokenizers for tokenizer.json files.
//
// # Loading
//
// LoadEncoding loads r50k_base (also gpt2), p50k_base, cl100k_base or o200k_base. The
// package knows their patterns and special tokens; the rank file <name>.tiktoken is looked
// for in the directories the caller passes, then in those of $DATALOADERD_TOKENIZERS, and
// must have the SHA-256 tiktoken expects. LoadTiktoken reads any rank file with a pattern of
// the caller's; LoadHF reads a tokenizer.json with a BPE model, ByteLevel and Split
// pre-tokenizers (possibly in a Sequence), no normalizer or NFC, and added tokens. Anything
// else is refused with an error naming the file and the field.
//
// # Pre-tokenization
//
// The references split text with backtracking regexes that use look-ahead, which Go's
// regexp lacks. The patterns of the GPT-2, cl100k and o200k families (which Llama 3, OLMo and
// Qwen tokenizer.json files also use, matched by exact string) have hand-written splitters;
// any other pattern runs on github.com/dlclark/regexp2, several times slower. The Unicode
// classes (\p{L}, \p{N}, \p{M}, \s and the letter subclasses) are the references' own, taken
// from their regex engines (Unicode 16.0.0; Go 1.26's tables are 15.0.0) by
// scripts/tokenize_unicode_tables.py. The regexp2 fallback uses Go's tables.
//
// # Special tokens
//
// By default special tokens are plain text, as in tiktoken's encode_ordinary and in
// Hugging Face's encode with encode_special_tokens set. An Encoder made with
// NewEncoder(names...) recognises the named ones (leftmost, then longest). Hugging Face
// added tokens that are not special are always recognised, as Hugging Face does.
//
// # Bytes that are not UTF-8
//
// tiktoken encodings do what tiktoken's Encoding._encode_bytes does, the only tiktoken entry
// point that takes bytes: the valid prefix is split and encoded; then the last piece's tokens
// (extended backwards over tokens of only ' ', '\n', '\t') are joined with everything from
// the first invalid byte to the end, and that run is merged as one piece. Nothing is lost:
// Decode gives the input back. tokenizer.json files follow Hugging Face, which only takes
// strings: the bytes are decoded as Python's bytes.decode("utf-8", "replace") does (one
// U+FFFD per maximal ill-formed subpart), then encoded.
//
// # Concurrency and speed
//
// A Tokenizer is immutable after loading and safe for concurrent use. Each worker goroutine
// should own an Encoder: it holds the piece cache (piece bytes -> tokens, about 5 MB at most)
// and scratch space, so that in the steady state encoding allocates nothing per piece.
// Tokenizer.Encode borrows Encoders from a pool. Pieces up to 96 bytes are merged by a
// quadratic scan over a flat table; longer ones by a heap in O(n log n).
//
// # Normalization
//
// With an NFC normalizer (Qwen), text is normalized as Hugging Face's NFC does it, whose
// data is Unicode 9.0.0: marks added since (U+0898, U+1ABF, U+1E4EC, ...) are starters to it,
// and U+11935 U+11930 do not compose. golang.org/x/text (15.0.0) would order and compose
// them, so the package has its own NFC (nfc.go) over tables probed from the reference by
// scripts/tokenize_nfc_tables.py. Like the reference, it does not insert U+034F into long
// runs of marks (the Stream-Safe Text Format that x/text follows).
package tokenize
