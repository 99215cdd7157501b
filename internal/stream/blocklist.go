package stream

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/state"
	"github.com/dataloaderd/dataloaderd/internal/text"
)

// Blocklist names documents that must never be served (docs/blocklists.md):
// entries given in the config, and files of them. It is applied as batches
// are made, with no re-preparation: a blocked document keeps its place in
// the stream (so that no cursor, line or window moves) and its tokens are
// written as padding. It is not in the corpus's fingerprint: a resume may
// add one.
type Blocklist struct {
	Documents []BlockedDocument `json:",omitempty"`
	// Files are files of entries, one JSON object a line, as
	// BlockedDocument's JSON form; blank lines and lines starting with #
	// are skipped.
	Files []string `json:",omitempty"`
}

// BlockedDocument names one document: in a Megatron or Arrow dataset by
// its index (the dataset's unit, as dataloaderd explain's `unit`, or with
// File its index in that file, explain's `document`), in a text dataset
// by the SHA-256 of its text (the record's field as UTF-8, before
// tokenizing), in lowercase hex, or by its line or row in File.
type BlockedDocument struct {
	Dataset  string  `json:"dataset"`
	File     string  `json:"file,omitempty"`
	Document *uint64 `json:"document,omitempty"`
	SHA256   string  `json:"sha256,omitempty"`
	// Line (from 1, a plain JSONL file's) or Row (from 0, a Parquet
	// file's) name a text document by its place in File, as explain's
	// jsonl_line and parquet_row.
	Line *uint64 `json:"line,omitempty"`
	Row  *uint64 `json:"row,omitempty"`
}

// Empty reports whether the blocklist names nothing.
func (b Blocklist) Empty() bool { return len(b.Documents) == 0 && len(b.Files) == 0 }

// maxBlocklistFile bounds a blocklist file, and maxBlocked the entries
// of a blocklist (a set of them is tens of bytes each in memory).
const (
	maxBlocklistFile = 256 << 20
	maxBlocked       = 1 << 22
)

// blockedUnits is what a dataset's blocklist holds: its blocked units (a
// Megatron or Arrow document each) and the hashes of its blocked texts.
type blockedUnits struct {
	units  map[uint64]struct{}
	hashes map[[sha256.Size]byte]struct{}
	// records are the text records named by place, by their unit.
	records map[uint64][]text.Record
	// texts is the cache of text units' blocked spans (text datasets).
	texts *textBlocks
}

// resolvedBlocklist is a corpus's blocklist, its entries checked against
// the datasets.
type resolvedBlocklist struct {
	fingerprint string
	entries     int
	// byDataset holds each dataset's entries, nil for a dataset with none.
	byDataset []*blockedUnits
}

// readBlocklist gathers the config's entries and its files', in order; a
// bad line names its file and line.
func readBlocklist(b Blocklist, roots *files.Roots) ([]BlockedDocument, []string, error) {
	if len(b.Documents) > maxBlocked {
		return nil, nil, invalid("blocklist.documents: %d entries, more than %d", len(b.Documents), maxBlocked)
	}
	docs := slices.Clone(b.Documents)
	where := make([]string, len(docs))
	for i := range docs {
		where[i] = fmt.Sprintf("blocklist.documents[%d]", i)
	}
	for _, path := range b.Files {
		raw, err := roots.ReadRegular("blocklist file", path, maxBlocklistFile)
		if outside := (*files.OutsideError)(nil); errors.As(err, &outside) {
			return nil, nil, outside
		}
		if err != nil {
			return nil, nil, invalid("blocklist file %q: %v", path, err)
		}
		for n, line := range bytes.Split(raw, []byte{'\n'}) {
			line = bytes.TrimSpace(line)
			if len(line) == 0 || line[0] == '#' {
				continue
			}
			var d BlockedDocument
			dec := json.NewDecoder(bytes.NewReader(line))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&d); err != nil {
				return nil, nil, invalid("blocklist file %q line %d: %v (want {\"dataset\": NAME, \"document\": N}, with \"file\": F and \"document\", \"line\" or \"row\", or {\"dataset\": NAME, \"sha256\": HEX})", path, n+1, err)
			}
			if len(docs) == maxBlocked {
				return nil, nil, invalid("blocklist file %q line %d: more than %d entries in all", path, n+1, maxBlocked)
			}
			docs = append(docs, d)
			where = append(where, fmt.Sprintf("blocklist file %q line %d", path, n+1))
		}
	}
	return docs, where, nil
}

// resolveBlocklist checks the blocklist's entries against the opened
// datasets and builds their sets; nil for an empty blocklist.
func (c *Corpus) resolveBlocklist(roots *files.Roots) (*resolvedBlocklist, error) {
	if c.cfg.Blocklist.Empty() {
		return nil, nil
	}
	docs, where, err := readBlocklist(c.cfg.Blocklist, roots)
	if err != nil {
		return nil, err
	}
	out := &resolvedBlocklist{byDataset: make([]*blockedUnits, len(c.datasets))}
	keys := make([]string, 0, len(docs))
	for i, d := range docs {
		k, err := c.blockOne(out, d)
		if err != nil {
			return nil, invalid("%s: %v", where[i], err)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	keys = slices.Compact(keys)
	sum := sha256.Sum256([]byte(strings.Join(keys, "\n")))
	out.fingerprint, out.entries = hex.EncodeToString(sum[:8]), len(keys)
	if out.entries == 0 {
		return nil, nil
	}
	return out, nil
}

// blockOne adds entry d to out, and returns its canonical key (what the
// blocklist's fingerprint is of).
func (c *Corpus) blockOne(out *resolvedBlocklist, d BlockedDocument) (string, error) {
	ds := c.datasetNamed(d.Dataset)
	if ds == nil {
		return "", fmt.Errorf("unknown dataset %q (the config's datasets: %s)", d.Dataset, strings.Join(c.DatasetNames(), ", "))
	}
	bu := out.byDataset[ds.index]
	if bu == nil {
		bu = &blockedUnits{units: map[uint64]struct{}{}, hashes: map[[sha256.Size]byte]struct{}{}}
		out.byDataset[ds.index] = bu
	}
	given := 0
	for _, set := range []bool{d.Document != nil, d.SHA256 != "", d.Line != nil, d.Row != nil} {
		if set {
			given++
		}
	}
	switch {
	case given != 1:
		return "", fmt.Errorf("dataset %q: give one of document, sha256, line and row", d.Dataset)
	case d.Line != nil || d.Row != nil:
		return c.blockRecord(ds, bu, d)
	case d.SHA256 != "":
		if !ds.lazy {
			return "", fmt.Errorf("dataset %q: sha256 names text; this dataset's format is already tokenized: block its documents by document index", d.Dataset)
		}
		if d.File != "" {
			return "", fmt.Errorf("dataset %q: file applies to a document index, not to sha256", d.Dataset)
		}
		h, err := hex.DecodeString(d.SHA256)
		if err != nil || len(h) != sha256.Size || strings.ToLower(d.SHA256) != d.SHA256 {
			return "", fmt.Errorf("dataset %q: sha256 %q is not 64 lowercase hex digits", d.Dataset, d.SHA256)
		}
		bu.hashes[[sha256.Size]byte(h)] = struct{}{}
		if bu.texts == nil {
			bu.texts = newTextBlocks()
		}
		return fmt.Sprintf("%s\x00h\x00%s", d.Dataset, d.SHA256), nil
	case ds.lazy:
		return "", fmt.Errorf("dataset %q is text: block its documents by sha256 (of the record's text), or by file and line or row", d.Dataset)
	case ds.src.Delimited():
		return "", fmt.Errorf("dataset %q is of flat token files, whose documents have no index: a blocklist applies to Megatron, Arrow and text datasets", d.Dataset)
	}
	u, err := c.unitOf(ds, d.File, *d.Document)
	if err != nil {
		return "", err
	}
	bu.units[u] = struct{}{}
	return fmt.Sprintf("%s\x00u\x00%020d", d.Dataset, u), nil
}

// unitOf is the dataset's unit of document doc: of the dataset, or with
// file of that file (its path as dataloaderd explain prints it, or its
// base name when only one file has it).
func (c *Corpus) unitOf(ds *shardedSource, file string, doc uint64) (uint64, error) {
	units := ds.src.Units()
	if file == "" {
		if doc >= units {
			return 0, fmt.Errorf("dataset %q: document %d is out of range: the dataset has %d documents", ds.name, doc, units)
		}
		return doc, nil
	}
	at, err := fileIndex(ds, file)
	if err != nil {
		return 0, err
	}
	fs := ds.src.Files()
	loc, ok := ds.src.(unitLocator)
	if !ok {
		return 0, fmt.Errorf("dataset %q: its files' documents cannot be placed", ds.name)
	}
	index := map[string]int{}
	for i, f := range fs {
		index[f.Path] = i
	}
	fileOf := func(u uint64) int {
		p, _, _ := loc.LocateUnit(u)
		return index[p]
	}
	first := uint64(sort.Search(int(units), func(u int) bool { return fileOf(uint64(u)) >= at }))
	u := first + doc
	if u >= units || fileOf(u) != at {
		n := uint64(sort.Search(int(units), func(u int) bool { return fileOf(uint64(u)) > at })) - first
		return 0, fmt.Errorf("dataset %q: document %d of file %q is out of range: the file has %d documents", ds.name, doc, file, n)
	}
	return u, nil
}

// fileIndex is the index among the dataset's files of the one file names:
// its path as dataloaderd explain prints it, or its base name when only
// one file has it.
func fileIndex(ds *shardedSource, file string) (int, error) {
	fs := ds.src.Files()
	at := -1
	for i, f := range fs {
		if f.Path == file || (!strings.Contains(file, "/") && filepath.Base(f.Path) == file) {
			if at >= 0 {
				return 0, fmt.Errorf("dataset %q: file %q names more than one of its files (%s and %s): give the path", ds.name, file, fs[at].Path, f.Path)
			}
			at = i
		}
	}
	if at < 0 {
		return 0, fmt.Errorf("dataset %q: file %q is not one of its %d files", ds.name, file, len(fs))
	}
	return at, nil
}

// recordUnitFinder is a text source that finds the unit of a record named
// by its place (text.Tokens).
type recordUnitFinder interface {
	UnitOfRecord(file int, n uint64) (uint64, error)
	IsParquet(file int) bool
}

// blockRecord adds a text document named by its line or row in a file.
func (c *Corpus) blockRecord(ds *shardedSource, bu *blockedUnits, d BlockedDocument) (string, error) {
	f, ok := ds.src.(recordUnitFinder)
	if !ds.lazy || !ok {
		return "", fmt.Errorf("dataset %q: line and row name text documents; block this dataset's by document index", d.Dataset)
	}
	if d.File == "" {
		return "", fmt.Errorf("dataset %q: a line or row needs the file it is in", d.Dataset)
	}
	at, err := fileIndex(ds, d.File)
	if err != nil {
		return "", err
	}
	rec, n, kind := text.Record{}, uint64(0), "line"
	switch parquet := f.IsParquet(at); {
	case parquet && d.Row == nil:
		return "", fmt.Errorf("dataset %q: file %q is Parquet: name its documents by row", d.Dataset, d.File)
	case !parquet && d.Line == nil:
		return "", fmt.Errorf("dataset %q: file %q is JSONL: name its documents by line", d.Dataset, d.File)
	case parquet:
		rec.Row, n, kind = *d.Row, *d.Row, "row"
	default:
		rec.Line, n = *d.Line, *d.Line
	}
	u, err := f.UnitOfRecord(at, n)
	if err != nil {
		return "", fmt.Errorf("dataset %q file %q: %v", d.Dataset, d.File, err)
	}
	if bu.records == nil {
		bu.records = map[uint64][]text.Record{}
	}
	if !slices.Contains(bu.records[u], rec) {
		bu.records[u] = append(bu.records[u], rec)
	}
	if bu.texts == nil {
		bu.texts = newTextBlocks()
	}
	return fmt.Sprintf("%s\x00%s\x00%s\x00%020d", d.Dataset, kind, ds.src.Files()[at].Path, n), nil
}

// datasetNamed is the corpus's dataset of that name, nil if none.
func (c *Corpus) datasetNamed(name string) *shardedSource {
	for _, d := range c.datasets {
		if d.name == name {
			return d
		}
	}
	return nil
}

// Blocklist is the record of the corpus's blocklist, as a state logs it;
// ok false when it has none.
func (c *Corpus) Blocklist() (state.Blocklist, bool) {
	if c.block == nil {
		return state.Blocklist{}, false
	}
	return state.Blocklist{Fingerprint: c.block.fingerprint, Entries: c.block.entries}, true
}
