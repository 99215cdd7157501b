package stream

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/state"
	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// madeBatch is a batch as a rank made it: its step and tokens.
type madeBatch struct {
	step   uint64
	lines  int
	tokens []int32
}

// makeBatches runs rank r of w from state from for up to steps batches
// (fewer where it ends) and returns them and its state after.
func makeBatches(t *testing.T, c *Corpus, r, w uint32, from *state.Restored, steps int) ([]madeBatch, state.Rank) {
	t.Helper()
	rank, err := NewRank(c, r, w, from)
	if err != nil {
		t.Fatal(err)
	}
	var out []madeBatch
	for range steps {
		buf := batchBuf(c.Config())
		p, err := rank.NextBatch(buf)
		if err != nil {
			t.Fatal(err)
		}
		if p.Lines == 0 {
			break
		}
		out = append(out, madeBatch{step: rank.Step(), lines: p.Lines, tokens: buf})
	}
	return out, rank.State()
}

// explainStep builds rank r of w from state from, as explain does, moves
// it to the step before step and explains that one.
func explainStep(t *testing.T, c *Corpus, r, w uint32, from *state.Restored, step uint64) explainedBatch {
	t.Helper()
	rank, err := NewRank(c, r, w, from)
	if err != nil {
		t.Fatal(err)
	}
	if err := rank.SkipTo(context.Background(), step-1); err != nil {
		t.Fatal(err)
	}
	buf := batchBuf(c.Config())
	p, pieces, err := rank.ExplainBatch(buf)
	if err != nil {
		t.Fatal(err)
	}
	return explainedBatch{buf, p, pieces}
}

// explainedBatch is what ExplainBatch gave.
type explainedBatch struct {
	tokens []int32
	p      Produced
	pieces []Piece
}

// TestExplainAgreesWithBatches: every step of a run on 2 ranks, saved and
// resumed on 3, explained from the run's start or from the saved state,
// is the batch the rank made (explain makes it the same way), and its
// pieces say where each token came from: over a corpus of unique tokens
// (Megatron documents holding EOS, a flat token file, Arrow, gzip JSONL
// tokenized on the fly), each piece's tokens are its document's tokens
// from TokenStart, framed as BOS and EOS say, the pieces of a line tile it
// up to its padding, and a document of a unit of several is counted in its
// unit as its place in the corpus says.
func TestExplainAgreesWithBatches(t *testing.T) {
	for seed := int64(1); seed <= 12; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			ds, origins, framed := metaCorpus(t, rng)
			cfg := randomConfig(rng, ds)
			cfg.LogicalShards = uint32(3 + rng.Intn(4))
			cfg.Epochs = uint32(rng.Intn(2)) // 0: endless, the counting skip for all but text
			if rng.Intn(2) == 0 {
				cfg.Datasets = cfg.Datasets[:1] // Megatron alone: counted on an endless stream
			}
			c := openInts(t, cfg, 2, 1<<20)
			ex := explained{t: t, cfg: cfg, origins: origins, framed: framed, unitBase: map[string]int{}}
			saveAt := 2 + rng.Intn(4)
			var states []state.Rank
			for r := uint32(0); r < 2; r++ {
				made, st := makeBatches(t, c, r, 2, nil, saveAt+3) // 3 batches past the save, lost
				states = append(states, st)
				for _, b := range made {
					ex.check(b, r, explainStep(t, c, r, 2, nil, b.step))
				}
			}
			// The state after saveAt, as each rank saved it then.
			for r := uint32(0); r < 2; r++ {
				_, states[r] = makeBatches(t, c, r, 2, nil, saveAt)
			}
			from := saveWorld(t, c.Fingerprint(), states)
			for r := uint32(0); r < 3; r++ {
				made, _ := makeBatches(t, c, r, 3, from, 6)
				for _, b := range made {
					ex.check(b, r, explainStep(t, c, r, 3, from, b.step))
				}
			}
			if ex.pieces == 0 {
				t.Fatal("nothing was explained")
			}
		})
	}
}

// explained checks explained batches against the batches made and the
// corpus.
type explained struct {
	t       *testing.T
	cfg     Config
	origins map[int32]origin
	framed  []bool
	// unitBase is, for each unit of several documents, the corpus index of
	// its first document: a document's index less its UnitDocument.
	unitBase map[string]int
	pieces   int
}

func (e *explained) check(b madeBatch, r uint32, x explainedBatch) {
	t := e.t
	t.Helper()
	tokens, p, pieces := x.tokens, x.p, x.pieces
	if p.Lines != b.lines || !slices.Equal(tokens, b.tokens) {
		t.Fatalf("rank %d step %d: explain made another batch than the run (%d lines, %d)", r, b.step, p.Lines, b.lines)
	}
	line := e.cfg.LineTokens()
	next := make([]int, b.lines) // each line's next column
	for _, pc := range pieces {
		where := fmt.Sprintf("rank %d step %d piece %+v", r, b.step, pc)
		if pc.Step != b.step || pc.DPRank != r || pc.Line >= b.lines || pc.ColumnStart != next[pc.Line] || pc.ColumnEnd <= pc.ColumnStart {
			t.Fatalf("%s: out of place (line's next column %d)", where, next[pc.Line])
		}
		next[pc.Line] = pc.ColumnEnd
		e.checkPiece(where, tokens[pc.Line*line+pc.ColumnStart:pc.Line*line+pc.ColumnEnd], pc)
		e.pieces++
	}
	for i, end := range next {
		for _, tok := range tokens[i*line+end : (i+1)*line] {
			if tok != testPad {
				t.Fatalf("rank %d step %d line %d: column %d on is not padding, but no piece holds it", r, b.step, i, end)
			}
		}
	}
}

// checkPiece checks a piece against its tokens in the line.
func (e *explained) checkPiece(where string, toks []int32, pc Piece) {
	t := e.t
	t.Helper()
	di := slices.IndexFunc(e.cfg.Datasets, func(d Dataset) bool { return d.Name == pc.Dataset })
	if di < 0 || pc.File == "" {
		t.Fatalf("%s: no such dataset, or no file", where)
	}
	if pc.BOS {
		if !e.framed[di] || e.cfg.BOS < 0 || toks[0] != testBOS {
			t.Fatalf("%s: BOS, but the line holds %d", where, toks[0])
		}
		toks = toks[1:]
	}
	if pc.EOS {
		if toks[len(toks)-1] != testEOS {
			t.Fatalf("%s: EOS, but the line holds %d", where, toks[len(toks)-1])
		}
		toks = toks[:len(toks)-1]
	}
	if uint64(len(toks)) != pc.TokenEnd-pc.TokenStart {
		t.Fatalf("%s: %d tokens of the document in the line, the span has %d", where, len(toks), pc.TokenEnd-pc.TokenStart)
	}
	for j, tok := range toks {
		o, ok := e.origins[tok]
		if !ok {
			if tok == testEOS && di == 0 { // inside a Megatron document
				continue
			}
			t.Fatalf("%s: token %d at %d is no document's", where, tok, j)
		}
		if o.dataset != di || uint64(o.index) != pc.TokenStart+uint64(j) {
			t.Fatalf("%s: token %d at %d is dataset %d document %d's token %d", where, tok, j, o.dataset, o.doc, o.index)
		}
		if pc.Document >= 0 {
			if int64(o.doc) != pc.Document || pc.UnitDocument != 0 {
				t.Fatalf("%s: token %d is of document %d", where, tok, o.doc)
			}
			continue
		}
		key := fmt.Sprintf("%s/%s/%d", pc.Dataset, pc.File, pc.FileUnit)
		base, seen := e.unitBase[key]
		if !seen {
			base = o.doc - int(pc.UnitDocument)
			e.unitBase[key] = base
		}
		if o.doc != base+int(pc.UnitDocument) {
			t.Fatalf("%s: token %d is of document %d, the unit's document %d is %d", where, tok, o.doc, pc.UnitDocument, base+int(pc.UnitDocument))
		}
	}
}

// TestExplainPlacesTextRecords: a piece of a plain JSONL file names the
// document's line (blank lines and a skipped bad record counted), a piece
// of a Parquet file its row, whatever block or row group holds it.
func TestExplainPlacesTextRecords(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	dir := t.TempDir()
	jdocs, next := testcorpus.UniqueDocs(rng, 40, 30, 1)
	pdocs, _ := testcorpus.UniqueDocs(rng, 30, 30, next)
	var b strings.Builder
	lines := map[int32]uint64{} // a JSONL token's line
	line := uint64(1)
	for i, d := range jdocs {
		fmt.Fprintf(&b, "{\"text\": %q}\n", testcorpus.Text(d))
		for _, tok := range d {
			lines[tok] = line
		}
		line++
		switch i {
		case 3:
			b.WriteString("\n")
			line++
		case 7:
			b.WriteString("{\"id\": \"no text\"}\n")
			line++
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "a.jsonl"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	rows := map[int32]uint64{}
	for i, d := range pdocs {
		for _, tok := range d {
			rows[tok] = uint64(i)
		}
	}
	testcorpus.Parquet(t, filepath.Join(dir, "p.parquet"), pdocs, 4)
	cfg := Config{SeqLen: 17, BatchSize: 2, Seed: 2, LogicalShards: 2, EOS: testEOS, BOS: testBOS, Pad: testPad, Epochs: 1,
		ShuffleWindow: 3, Datasets: []Dataset{
			{Name: "j", Path: filepath.Join(dir, "a.jsonl"), Format: "jsonl", Weight: 1, Tokenizer: "ints", OnBadRecord: "skip"},
			{Name: "p", Path: filepath.Join(dir, "p.parquet"), Format: "parquet", Weight: 1, Tokenizer: "ints"}}}
	c := openInts(t, cfg, 2, 1<<20)
	placed := 0
	for r := uint32(0); r < 2; r++ {
		for step := uint64(1); ; step++ {
			x := explainStep(t, c, r, 2, nil, step)
			if x.p.Lines == 0 {
				break
			}
			for _, pc := range x.pieces {
				toks := x.tokens[pc.Line*cfg.LineTokens()+pc.ColumnStart : pc.Line*cfg.LineTokens()+pc.ColumnEnd]
				tok := toks[0]
				if pc.BOS {
					tok = toks[min(1, len(toks)-1)]
				}
				if tok == testEOS || tok == testBOS {
					continue // a piece of framing alone
				}
				switch {
				case pc.Dataset == "j" && pc.JSONLLine != lines[tok]:
					t.Fatalf("%+v: jsonl_line %d, the document is on line %d", pc, pc.JSONLLine, lines[tok])
				case pc.Dataset == "p" && (pc.ParquetRow == nil || *pc.ParquetRow != rows[tok]):
					t.Fatalf("%+v: parquet_row %v, the document is row %d", pc, pc.ParquetRow, rows[tok])
				}
				placed++
			}
		}
	}
	if placed < 40 {
		t.Fatalf("only %d pieces placed", placed)
	}
}
