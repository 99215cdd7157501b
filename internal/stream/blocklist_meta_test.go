package stream

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// TestBlocklistMetadata: a blocked document's columns are padding in
// every metadata field (document_ids -1, position_ids 0, no loss on its
// labels nor on the label after it), the documents around it keep their
// positions and loss, and the line's document ids count the documents
// left, from 0; explain marks exactly the blocked documents' pieces.
func TestBlocklistMetadata(t *testing.T) {
	for seed := int64(1); seed <= 12; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			bc := newBlockCorpus(t, rng)
			cfg := randomConfig(rng, bc.ds)
			cfg.LogicalShards = 3
			cfg.Metadata = MetadataFields
			cfg.MaskDocumentBoundaries = rng.Intn(2) == 0
			if rng.Intn(2) == 0 {
				cfg.Positions = PositionsContinue
			}
			plainCorpus := openInts(t, cfg, 2, 1<<20)
			bcfg := cfg
			bcfg.Blocklist = bc.list
			blockCorpus := openInts(t, bcfg, 2, 1<<20)
			plain, _ := NewRank(plainCorpus, 0, 1, nil)
			blocked, _ := NewRank(blockCorpus, 0, 1, nil)
			explained, _ := NewRank(blockCorpus, 0, 1, nil)
			pslot, bslot := make([]byte, cfg.Layout().Bytes), make([]byte, cfg.Layout().Bytes)
			for step := 0; ; step++ {
				pp, err := plain.NextBatchBytes(pslot)
				if err != nil {
					t.Fatal(err)
				}
				bp, err := blocked.NextBatchBytes(bslot)
				if err != nil || bp.Lines != pp.Lines {
					t.Fatalf("step %d: %d lines (%v), without the blocklist %d", step, bp.Lines, err, pp.Lines)
				}
				if pp.Lines == 0 {
					break
				}
				pl, bl := slotLines(t, cfg, pslot, pp), slotLines(t, cfg, bslot, bp)
				for i := range bl {
					bc.sameGeometry(t, pl[i].tokens, bl[i].tokens)
					checkBlockedLine(t, pl[i], bl[i], int(cfg.SeqLen))
				}
				bc.checkExplained(t, explained, cfg, bl)
			}
		})
	}
}

// checkBlockedLine holds a line made under a blocklist to the same line
// made without it.
func checkBlockedLine(t *testing.T, plain, blocked metaLine, seq int) {
	t.Helper()
	next := int32(0)
	for k, tok := range blocked.tokens {
		pad := tok == testPad
		switch {
		case pad && (blocked.doc[k] != -1 || blocked.pos[k] != 0):
			t.Fatalf("column %d: padding with document id %d, position %d", k, blocked.doc[k], blocked.pos[k])
		case pad:
			continue
		case blocked.doc[k] != next && blocked.doc[k] != next-1:
			t.Fatalf("column %d: document id %d after %d", k, blocked.doc[k], next-1)
		case blocked.pos[k] != plain.pos[k]:
			t.Fatalf("column %d: position %d, without the blocklist %d", k, blocked.pos[k], plain.pos[k])
		}
		if blocked.doc[k] == next {
			next++
		}
	}
	for k := 0; k < seq; k++ {
		padded := blocked.tokens[k] == testPad || blocked.tokens[k+1] == testPad
		switch {
		case padded && blocked.loss[k] != 0:
			t.Fatalf("column %d: loss on padding (tokens %d, %d)", k, blocked.tokens[k], blocked.tokens[k+1])
		case !padded && blocked.loss[k] != plain.loss[k]:
			t.Fatalf("column %d: loss %d, without the blocklist %d", k, blocked.loss[k], plain.loss[k])
		}
	}
}

// checkExplained explains the rank's next batch and holds its pieces to
// the lines served: a piece is marked blocked exactly where its document
// is, and its columns are padding.
func (bc blockCorpus) checkExplained(t *testing.T, r *Rank, cfg Config, lines []metaLine) {
	t.Helper()
	_, pieces, err := r.ExplainBatch(batchBuf(cfg))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pieces {
		var doc int64
		switch p.Dataset {
		case "x":
			doc = int64(p.JSONLLine) - 1
		case "q":
			doc = int64(*p.ParquetRow)
		default:
			doc = int64(p.Unit)
		}
		want := bc.blocked[docRef{p.Dataset, int(doc)}]
		if p.Blocked != want {
			t.Fatalf("piece %+v: blocked %v, its document %d is blocked: %v", p, p.Blocked, doc, want)
		}
		for k := p.ColumnStart; k < p.ColumnEnd; k++ {
			if tok := lines[p.Line].tokens[k]; (tok == testPad) != want {
				t.Fatalf("piece %+v: column %d holds %d", p, k, tok)
			}
		}
	}
}

// TestBlocklistRefused: an entry naming an unknown dataset, a document out
// of range, a bad hash, a hash for pre-tokenized data or an index for
// text, a file that cannot be read or a bad line of one: the corpus is
// not opened, and the error names the entry and what is wrong.
func TestBlocklistRefused(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	bc := newBlockCorpus(t, rng)
	dir := t.TempDir()
	flat := filepath.Join(dir, "flat.bin")
	if err := os.WriteFile(flat, make([]byte, 64), 0o644); err != nil {
		t.Fatal(err)
	}
	badLine := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(badLine, []byte("{\"dataset\": \"a\", \"document\": 1}\n{\"dataset\": \"a\", \"doc\": 2}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n := func(v uint64) *uint64 { return &v }
	hash := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		list Blocklist
		want string
	}{
		{Blocklist{Documents: []BlockedDocument{{Dataset: "nope", Document: n(0)}}}, `blocklist.documents[0]: unknown dataset "nope"`},
		{Blocklist{Documents: []BlockedDocument{{Dataset: "a", Document: n(1 << 40)}}}, `document 1099511627776 is out of range: the dataset has`},
		{Blocklist{Documents: []BlockedDocument{{Dataset: "a", File: "a.bin", Document: n(1 << 20)}}}, `of file "a.bin" is out of range`},
		{Blocklist{Documents: []BlockedDocument{{Dataset: "a", File: "other.bin", Document: n(0)}}}, `file "other.bin" is not one of its 2 files`},
		{Blocklist{Documents: []BlockedDocument{{Dataset: "x", SHA256: "abc"}}}, `sha256 "abc" is not 64 lowercase hex digits`},
		{Blocklist{Documents: []BlockedDocument{{Dataset: "x", SHA256: strings.ToUpper(hash)}}}, `is not 64 lowercase hex digits`},
		{Blocklist{Documents: []BlockedDocument{{Dataset: "a", SHA256: hash}}}, `dataset "a": sha256 names text`},
		{Blocklist{Documents: []BlockedDocument{{Dataset: "x", Document: n(0)}}}, `dataset "x" is text: block its documents by sha256`},
		{Blocklist{Documents: []BlockedDocument{{Dataset: "f", Document: n(0)}}}, `dataset "f" is of flat token files`},
		{Blocklist{Documents: []BlockedDocument{{Dataset: "a"}}}, `give one of document, sha256, line and row`},
		{Blocklist{Documents: []BlockedDocument{{Dataset: "x", Document: n(0), SHA256: hash}}}, `give one of document, sha256, line and row`},
		{Blocklist{Documents: []BlockedDocument{{Dataset: "x", File: "x.jsonl", Line: n(0)}}}, `dataset "x" file "x.jsonl": line 0: lines count from 1`},
		{Blocklist{Documents: []BlockedDocument{{Dataset: "x", File: "x.jsonl", Line: n(100000)}}}, `line 100000 is out of range: the file has`},
		{Blocklist{Documents: []BlockedDocument{{Dataset: "x", Line: n(1)}}}, `a line or row needs the file it is in`},
		{Blocklist{Documents: []BlockedDocument{{Dataset: "x", File: "x.jsonl", Row: n(1)}}}, `file "x.jsonl" is JSONL: name its documents by line`},
		{Blocklist{Documents: []BlockedDocument{{Dataset: "q", File: "q.parquet", Line: n(1)}}}, `file "q.parquet" is Parquet: name its documents by row`},
		{Blocklist{Documents: []BlockedDocument{{Dataset: "q", File: "q.parquet", Row: n(100000)}}}, `row 100000 is out of range: the file has`},
		{Blocklist{Documents: []BlockedDocument{{Dataset: "a", File: "a.bin", Line: n(1)}}}, `line and row name text documents`},
		{Blocklist{Files: []string{filepath.Join(dir, "missing.jsonl")}}, `blocklist file "` + filepath.Join(dir, "missing.jsonl")},
		{Blocklist{Files: []string{badLine}}, `blocklist file "` + badLine + `" line 2: json: unknown field "doc"`},
	} {
		cfg := randomConfig(rng, append(bc.ds, Dataset{Name: "f", Path: flat, Format: "tokens", Weight: 1}))
		cfg.LogicalShards = 2
		cfg.Blocklist = tc.list
		res := NewResources(1, 1<<20, nil)
		res.addTokenizer("ints", testcorpus.Ints{})
		c, err := OpenCorpusWith(cfg, res)
		if err == nil {
			c.Close()
		}
		res.Close()
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "invalid config") {
			t.Errorf("%+v: %v, want an invalid config error with %q", tc.list, err, tc.want)
		}
	}
}
