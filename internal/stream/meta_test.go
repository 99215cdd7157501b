package stream

import (
	"encoding/binary"
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

// origin is where a data token of the metadata corpus came from.
type origin struct {
	dataset, doc int
	index        int // in the document's body
}

// metaCorpus writes a corpus of every kind of document boundary: a Megatron
// dataset whose documents hold the EOS id inside them (Megatron documents
// are not split on it) and are often of one token, a flat token file
// (documents split on EOS), an Arrow dataset and a JSONL dataset tokenized
// on the fly. Every data token value is unique; origins maps each to its
// place.
func metaCorpus(t *testing.T, rng *rand.Rand) ([]Dataset, map[int32]origin, []bool) {
	dir := t.TempDir()
	origins := map[int32]origin{}
	next := int32(1)
	var sets [4][][]int32
	for i, n := range []int{40, 30, 25, 25} {
		var docs [][]int32
		docs, next = testcorpus.UniqueDocs(rng, n+rng.Intn(n), 30, next)
		for d, doc := range docs {
			for k, tok := range doc {
				origins[tok] = origin{dataset: i, doc: d, index: k}
			}
		}
		sets[i] = docs
	}
	if next >= testPad {
		t.Fatalf("corpus too large for uint16 token values: %d", next)
	}
	// Megatron documents of one token, and documents with EOS inside.
	mega := make([][]int32, len(sets[0]))
	for d, doc := range sets[0] {
		switch {
		case d%5 == 1:
			doc = doc[:1]
		case d%3 == 0 && len(doc) > 2:
			cut := 1 + rng.Intn(len(doc)-2)
			doc = slices.Concat(doc[:cut], []int32{testEOS}, doc[cut:])
		}
		mega[d] = doc
	}
	// origins index the bodies as written: recompute for the Megatron set.
	for d, doc := range mega {
		for k, tok := range doc {
			if tok != testEOS {
				origins[tok] = origin{dataset: 0, doc: d, index: k}
			}
		}
	}
	for _, doc := range sets[0] {
		for _, tok := range doc {
			if o := origins[tok]; o.dataset == 0 && !slices.Contains(mega[o.doc], tok) {
				delete(origins, tok) // cut from its one-token document
			}
		}
	}
	testcorpus.Tokens(t, filepath.Join(dir, "flat.bin"), sets[1], testEOS)
	text := filepath.Join(dir, "text")
	if err := os.Mkdir(text, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, per := 0, (len(sets[3])+5)/6; f*per < len(sets[3]); f++ {
		writeJSONL(t, filepath.Join(text, fmt.Sprintf("%d.jsonl.gz", f)), sets[3][f*per:min((f+1)*per, len(sets[3]))], true, false)
	}
	ds := []Dataset{
		{Name: "mega", Path: testcorpus.Megatron(t, dir, "mega", mega), Format: "megatron", Weight: 2},
		{Name: "flat", Path: filepath.Join(dir, "flat.bin"), Format: "tokens", Weight: 1},
		{Name: "arrow", Path: testcorpus.Arrow(t, dir, "arrow", sets[2], 5), Format: "arrow", Weight: 1},
		{Name: "text", Path: text, Format: "jsonl", Weight: 1, Tokenizer: "ints"},
	}
	// Which datasets frame documents with the optional BOS: all but the
	// flat file, whose units carry their own separators.
	return ds, origins, []bool{true, false, true, true}
}

// metaLine is one line of a batch with its metadata.
type metaLine struct {
	tokens, pos, doc []int32
	loss             []uint8
	cu               []int32 // the line's cu_seqlens, from 0
	dataset          int32
}

// slotLines splits a slot written by NextBatchBytes into its lines.
func slotLines(t *testing.T, cfg Config, slot []byte, p Produced) []metaLine {
	t.Helper()
	lay := cfg.Layout()
	i32 := func(name string) []int32 {
		f, ok := lay.field(name)
		if !ok {
			t.Fatalf("layout lacks %s", name)
		}
		out := make([]int32, 0, f.Shape[0])
		n := 1
		for _, d := range f.Shape {
			n *= d
		}
		for k := 0; k < n; k++ {
			out = append(out, int32(binary.LittleEndian.Uint32(slot[f.Offset+4*k:])))
		}
		return out
	}
	line, seq := cfg.LineTokens(), int(cfg.SeqLen)
	toks, pos, doc, ds := i32("tokens"), i32(MetaPositionIDs), i32(MetaDocumentIDs), i32(MetaDatasetIDs)
	cu, segs := i32(MetaCuSeqlens), i32(lineSegmentsField)
	lf, _ := lay.field(MetaLossMask)
	if int(segs[p.Lines]) != p.Segments {
		t.Fatalf("line_segments ends at %d, the batch has %d segments", segs[p.Lines], p.Segments)
	}
	var out []metaLine
	longest := 0
	for b := 0; b < p.Lines; b++ {
		ml := metaLine{tokens: toks[b*line : (b+1)*line], pos: pos[b*line : (b+1)*line], doc: doc[b*line : (b+1)*line],
			loss: slices.Clone(slot[lf.Offset+b*seq : lf.Offset+(b+1)*seq]), dataset: ds[b]}
		for k := segs[b]; k <= segs[b+1]; k++ {
			ml.cu = append(ml.cu, cu[k]-int32(b*seq))
			if k > segs[b] {
				longest = max(longest, int(cu[k]-cu[k-1]))
			}
		}
		out = append(out, ml)
	}
	if longest != p.MaxSeqlen {
		t.Fatalf("max_seqlen %d, the longest segment is %d", p.MaxSeqlen, longest)
	}
	return out
}

// checkLine checks a line's metadata against where its tokens came from.
func checkLine(t *testing.T, cfg Config, ml metaLine, origins map[int32]origin, framed []bool) {
	t.Helper()
	line, seq := cfg.LineTokens(), int(cfg.SeqLen)
	bos := 0
	if cfg.BOS >= 0 {
		bos = 1
	}
	// Each token's document (a key, -1 for padding, -2 unknown: the EOS
	// that ends a document continued from the line before) and its position
	// in the document as framed (-1 unknown).
	keys, at := make([]int, line), make([]int, line)
	filled := line
	for filled > 0 && ml.tokens[filled-1] == testPad {
		filled--
	}
	dataset := -1
	for k := 0; k < line; k++ {
		tok := ml.tokens[k]
		o, data := origins[tok]
		switch {
		case k >= filled:
			keys[k], at[k] = -1, -1
		case data:
			head := 0
			if framed[o.dataset] {
				head = bos
			}
			keys[k], at[k] = o.dataset<<20|o.doc, head+o.index
			if dataset >= 0 && dataset != o.dataset {
				t.Fatalf("line mixes datasets %d and %d", dataset, o.dataset)
			}
			dataset = o.dataset
		case k > 0 && keys[k-1] >= 0 && tok == testEOS:
			// After a document's token, EOS is inside the document (Megatron)
			// or ends it: either way it is the same document's.
			keys[k], at[k] = keys[k-1], at[k-1]+1
		case k > 0 && keys[k-1] == -2 && tok == testEOS:
			keys[k], at[k] = -2, -1
		case tok == testBOS:
			keys[k], at[k] = -3, 0 // the next token's document
		default:
			keys[k], at[k] = -2, -1
		}
	}
	for k := line - 1; k >= 0; k-- {
		switch {
		case keys[k] != -3:
		case k+1 == filled:
			keys[k] = 1<<40 + k // a document that starts on the line's last token
		case keys[k+1] < 0:
			t.Fatalf("BOS at %d is not followed by a document: %v", k, ml.tokens)
		default:
			keys[k] = keys[k+1]
		}
	}
	// A token after an EOS that ended a document starts another; an EOS
	// inside a Megatron document does not (its document's next token
	// follows): keys tell them apart, since data tokens name their documents.
	if dataset >= 0 && int(ml.dataset) != dataset {
		t.Fatalf("dataset_ids %d, the line's tokens are of dataset %d", ml.dataset, dataset)
	}
	ids := map[int]int32{}
	want := int32(0)
	for k := 0; k < line; k++ {
		d := ml.doc[k]
		switch {
		case keys[k] == -1:
			if d != -1 || ml.pos[k] != 0 {
				t.Fatalf("padding at %d: document %d position %d", k, d, ml.pos[k])
			}
			continue
		case k > 0 && d != ml.doc[k-1]:
			want++
		}
		if d != want {
			t.Fatalf("document_ids %v do not count up from 0 at %d", ml.doc, k)
		}
		if keys[k] >= 0 {
			if prev, ok := ids[keys[k]]; ok && prev != d {
				t.Fatalf("one document has ids %d and %d in line %v (ids %v)", prev, d, ml.tokens, ml.doc)
			}
			ids[keys[k]] = d
		}
		if k > 0 && keys[k] >= 0 && keys[k-1] >= 0 && (keys[k] == keys[k-1]) != (d == ml.doc[k-1]) {
			t.Fatalf("tokens %d and %d: documents %d %d, ids %d %d (line %v)", k-1, k, keys[k-1], keys[k], ml.doc[k-1], d, ml.tokens)
		}
		start := k
		for start > 0 && ml.doc[start-1] == d {
			start--
		}
		switch {
		case cfg.Positions == PositionsContinue && at[k] >= 0 && int(ml.pos[k]) != at[k]:
			t.Fatalf("position_ids[%d] = %d, the token is at %d of its document (line %v, positions %v)", k, ml.pos[k], at[k], ml.tokens, ml.pos)
		case cfg.Positions != PositionsContinue && int(ml.pos[k]) != k-start:
			t.Fatalf("position_ids[%d] = %d, want %d: restart counts from the line's start (positions %v)", k, ml.pos[k], k-start, ml.pos)
		case k > start && ml.pos[k] != ml.pos[k-1]+1:
			t.Fatalf("position_ids %v do not count up within a document", ml.pos)
		}
	}
	var cu []int32
	cu = append(cu, 0)
	for k := 1; k <= seq; k++ {
		if k == seq || ml.doc[k] != ml.doc[k-1] {
			cu = append(cu, int32(k))
		}
	}
	if !slices.Equal(cu, ml.cu) {
		t.Fatalf("cu_seqlens of the line %v, want %v (document_ids %v)", ml.cu, cu, ml.doc)
	}
	for k := 0; k < seq; k++ {
		w := uint8(1)
		if k+1 >= filled || cfg.MaskDocumentBoundaries && ml.doc[k+1] != ml.doc[k] {
			w = 0
		}
		if ml.loss[k] != w {
			t.Fatalf("loss_mask[%d] = %d, want %d (filled %d, document_ids %v)", k, ml.loss[k], w, filled, ml.doc)
		}
	}
}

func metaConfig(rng *rand.Rand, ds []Dataset) Config {
	cfg := randomConfig(rng, ds)
	cfg.LogicalShards = uint32(2 + rng.Intn(4))
	cfg.Metadata = slices.Clone(MetadataFields)
	rng.Shuffle(len(cfg.Metadata), func(i, j int) { cfg.Metadata[i], cfg.Metadata[j] = cfg.Metadata[j], cfg.Metadata[i] })
	cfg.Positions = []string{"", PositionsRestart, PositionsContinue}[rng.Intn(3)]
	cfg.MaskDocumentBoundaries = rng.Intn(2) == 0
	return cfg
}

// runMeta takes every batch of rank r of w (up to steps; -1: to the end)
// from state from, and returns its lines and the rank's state.
func runMeta(t *testing.T, c *Corpus, r, w uint32, from *state.Restored, steps int) ([]metaLine, state.Rank) {
	t.Helper()
	rank, err := NewRank(c, r, w, from)
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.Config()
	slot := make([]byte, cfg.Layout().Bytes)
	var lines []metaLine
	for s := 0; steps < 0 || s < steps; s++ {
		for i := range slot {
			slot[i] = 0xA5 // what a slot held before: every field must be written
		}
		p, err := rank.NextBatchBytes(slot)
		if err != nil {
			t.Fatal(err)
		}
		if p.Lines == 0 {
			break
		}
		lines = append(lines, slotLines(t, cfg, slot, p)...)
	}
	return lines, rank.State()
}

// TestMetadata checks every line's metadata against where its tokens came
// from, over documents longer than a line, starting mid-line, ending at a
// line's end, of one token, holding the EOS id (Megatron), with and without
// BOS, padding at the end of bounded epochs, flat token files, Arrow and
// text tokenized on the fly; and that the metadata is a function of the
// cursors: a run saved, resumed and rescaled gives every line the same
// metadata, bit for bit, as an uninterrupted run.
func TestMetadata(t *testing.T) {
	for seed := int64(1); seed <= 16; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			ds, origins, framed := metaCorpus(t, rng)
			cfg := metaConfig(rng, ds)
			c := openInts(t, cfg, 2, 1<<20)
			// Lines by what they hold: two lines may hold the same tokens
			// (an EOS and padding, at the end of two shards).
			var whole, resumed []string
			for r := uint32(0); r < 2; r++ {
				lines, _ := runMeta(t, c, r, 2, nil, -1)
				for _, ml := range lines {
					checkLine(t, cfg, ml, origins, framed)
					whole = append(whole, fmt.Sprintf("%+v", ml))
				}
			}
			// Save after a few steps on 2 ranks, resume on 1 or 3.
			var states []state.Rank
			for r := uint32(0); r < 2; r++ {
				lines, st := runMeta(t, c, r, 2, nil, 1+rng.Intn(4))
				states = append(states, st)
				for _, ml := range lines {
					resumed = append(resumed, fmt.Sprintf("%+v", ml))
				}
			}
			from := saveWorld(t, c.Fingerprint(), states)
			w := uint32(1 + 2*rng.Intn(2))
			w = min(w, cfg.LogicalShards)
			for r := uint32(0); r < w; r++ {
				lines, _ := runMeta(t, c, r, w, from, -1)
				for _, ml := range lines {
					resumed = append(resumed, fmt.Sprintf("%+v", ml))
				}
			}
			slices.Sort(whole)
			slices.Sort(resumed)
			for i := range max(len(whole), len(resumed)) {
				if i >= len(whole) || i >= len(resumed) || whole[i] != resumed[i] {
					t.Fatalf("the lines and metadata of a run resumed on %d ranks differ from an uninterrupted run's (%d and %d lines), first at %d", w, len(resumed), len(whole), i)
				}
			}
		})
	}
}

// TestMetadataOffKeepsTheSlot: without metadata the slot is the tokens
// alone, as before, and the batch says nothing of segments.
func TestMetadataOffKeepsTheSlot(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	ds, _ := testCorpus(t, rng)
	cfg := randomConfig(rng, ds)
	lay := cfg.Layout()
	if len(lay.Fields) != 1 || lay.Bytes != int(cfg.BatchSize)*cfg.LineTokens()*4 {
		t.Fatalf("layout without metadata: %+v", lay)
	}
	c, err := OpenCorpus(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rank, err := NewRank(c, 0, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := rank.NextBatchBytes(make([]byte, lay.Bytes))
	if err != nil || p.Lines == 0 || p.Segments != 0 || p.MaxSeqlen != 0 {
		t.Fatalf("batch %+v, %v", p, err)
	}
}

// TestMetadataConfig: unknown or repeated fields, and options without the
// field they apply to, are refused with the key and value.
func TestMetadataConfig(t *testing.T) {
	base := Config{SeqLen: 8, BatchSize: 2, LogicalShards: 1, EOS: 0, BOS: -1,
		Datasets: []Dataset{{Name: "a", Path: "/x", Format: "megatron", Weight: 1}}}
	for _, tc := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Metadata = []string{"segment_ids"} }, `unknown field "segment_ids"`},
		{func(c *Config) { c.Metadata = []string{"loss_mask", "loss_mask"} }, `"loss_mask" is listed twice`},
		{func(c *Config) { c.Metadata = []string{"position_ids"}; c.Positions = "absolute" }, `positions: "absolute"`},
		{func(c *Config) { c.Positions = "continue" }, "positions applies to position_ids"},
		{func(c *Config) { c.MaskDocumentBoundaries = true }, "mask_document_boundaries applies to loss_mask"},
	} {
		c := base
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error with %q", c, err, tc.want)
		}
	}
}
