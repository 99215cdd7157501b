package files

import (
	"slices"
	"strconv"
	"strings"
)

// Names of the dataset formats, as a job config spells them.
const (
	Megatron = "megatron"
	Tokens   = "tokens"
	Arrow    = "arrow"
	Parquet  = "parquet"
	JSONL    = "jsonl"
)

// Default fields of the formats that read one column or field.
const (
	// TokenColumn is the token column of Arrow IPC files.
	TokenColumn = "tokens"
	// TextField is the text column of Parquet files and the text field of
	// JSONL records.
	TextField = "text"
)

// Format is what the daemon knows of one dataset format: whether its files
// hold token ids or text, which files of a directory belong to it, and how
// errors name them.
type Format struct {
	// Name is the format's name in a job config.
	Name string
	// Text is true for raw text tokenized on the fly, false for token ids.
	Text bool
	// Paired is true when a dataset file is a PREFIX.idx and PREFIX.bin pair
	// (Megatron): Resolve then returns prefixes.
	Paired bool
	// Exts are the endings of the files a directory dataset is made of.
	Exts []string
	// Field is the default token column or text field; empty for formats
	// that have none.
	Field string
	// Files names the format's files in "no ... files found" errors.
	Files string
}

// formats is the registry, in the order users meet the formats.
var formats = []Format{
	{Name: Megatron, Paired: true, Exts: []string{".idx"}, Files: "megatron (PREFIX.idx and PREFIX.bin)"},
	{Name: Tokens, Exts: []string{".bin"}, Files: "tokens (.bin)"},
	{Name: Arrow, Exts: []string{".arrow"}, Field: TokenColumn, Files: "arrow (.arrow)"},
	{Name: Parquet, Text: true, Exts: []string{".parquet"}, Field: TextField, Files: "parquet (.parquet)"},
	{Name: JSONL, Text: true, Exts: []string{".jsonl", ".jsonl.gz", ".jsonl.zst", ".ndjson", ".ndjson.gz", ".ndjson.zst"},
		Field: TextField, Files: "jsonl (.jsonl, .ndjson, optionally .gz or .zst)"},
}

// Lookup returns the format of a name, and whether there is one.
func Lookup(name string) (Format, bool) {
	for _, f := range formats {
		if f.Name == name {
			return f.clone(), true
		}
	}
	return Format{}, false
}

func (f Format) clone() Format {
	f.Exts = slices.Clone(f.Exts)
	return f
}

// Names returns the names of the formats match accepts (all when match is
// nil), in the registry's order.
func Names(match func(Format) bool) []string {
	var names []string
	for _, f := range formats {
		if match == nil || match(f) {
			names = append(names, f.Name)
		}
	}
	return names
}

// IsText reports whether a format is tokenized on the fly.
func IsText(f Format) bool { return f.Text }

// IsTokens reports whether a format holds token ids.
func IsTokens(f Format) bool { return !f.Text }

// HasField reports whether a format reads a named column or field.
func HasField(f Format) bool { return f.Field != "" }

// Quote returns words, each quoted as Go quotes a string.
func Quote(words []string) []string {
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = strconv.Quote(w)
	}
	return out
}

// List joins words for a message: "a", "a or b", "a, b or c" (with conj "or").
func List(words []string, conj string) string {
	switch n := len(words); n {
	case 0:
		return ""
	case 1:
		return words[0]
	default:
		return strings.Join(words[:n-1], ", ") + " " + conj + " " + words[n-1]
	}
}

// hasExt reports whether name ends in one of exts.
func hasExt(name string, exts []string) bool {
	for _, ext := range exts {
		if strings.HasSuffix(name, ext) {
			return true
		}
	}
	return false
}
