package stream

import (
	"fmt"
	"slices"

	"github.com/dataloaderd/dataloaderd/internal/text"
)

// Explaining a batch (dataloaderd explain): a rank makes it as NextBatch
// does, its assembly keeping each line's pieces (assembly.trace), and each
// piece is then named: its dataset, file, document and the document's
// tokens it took. Nothing here runs unless a batch is explained.

// Piece says where one run of a batch's line came from: columns
// [ColumnStart, ColumnEnd) of line Line hold tokens [TokenStart, TokenEnd)
// of one document, with the BOS the stream put before it (BOS) and the EOS
// after it (EOS) when the run holds them.
type Piece struct {
	// BatchID names the batch (BatchID), as the client's batch_id does.
	BatchID     string `json:"batch_id"`
	Step        uint64 `json:"step"`
	DPRank      uint32 `json:"dp_rank"`
	Line        int    `json:"line"`
	ColumnStart int    `json:"column_start"`
	ColumnEnd   int    `json:"column_end"`
	Dataset     string `json:"dataset"`
	Shard       uint32 `json:"shard"`
	// Unit is the unit's number in the dataset; File holds it (a Megatron
	// dataset's .bin), as its FileUnit-th unit: the document (Megatron,
	// Arrow), the token block (flat token files), the byte block (JSONL)
	// or the row group (Parquet).
	Unit     uint64 `json:"unit"`
	File     string `json:"file"`
	FileUnit uint64 `json:"file_unit"`
	// Document is the document's index in its file where a unit is one
	// document (Megatron, Arrow), -1 where a unit holds several (flat
	// token files, text); UnitDocument is its index in the unit, counted
	// by the EOS tokens that end them (0 where a unit is one document).
	Document     int64  `json:"document"`
	UnitDocument uint64 `json:"unit_document"`
	// JSONLLine is a text document's line in its plain JSONL file (from 1;
	// 0: not known, as in a compressed one), ParquetRow its row in its
	// Parquet file (from 0), when the source places it.
	JSONLLine  uint64  `json:"jsonl_line,omitempty"`
	ParquetRow *uint64 `json:"parquet_row,omitempty"`
	// TokenStart and TokenEnd count the document's own tokens (for text,
	// as tokenized), the framing left out.
	TokenStart uint64 `json:"token_start"`
	TokenEnd   uint64 `json:"token_end"`
	BOS        bool   `json:"bos"`
	EOS        bool   `json:"eos"`
	// Blocked is set for a document the blocklist names: its columns
	// hold padding, not its tokens.
	Blocked bool `json:"blocked,omitempty"`
}

// batchTrace is the lines of one batch as they were taken: each one's
// shard and pieces.
type batchTrace struct {
	lines []tracedLine
}

type tracedLine struct {
	from   *shard
	pieces []piece
}

// add keeps the pieces of the next line of the batch, taken from shard s.
func (t *batchTrace) add(s *shard, pieces []piece) {
	t.lines = append(t.lines, tracedLine{from: s, pieces: slices.Clone(pieces)})
}

// recordPlacer is a text source that places each document of a unit in its
// file (text.Tokens): a JSONL line, a Parquet row.
type recordPlacer interface {
	Records(u uint64) ([]text.Record, bool, error)
}

// unitLocator is a source that names the file of a unit and the unit's
// number in it (source's datasets, text.Tokens); ok false: it cannot say.
type unitLocator interface {
	LocateUnit(u uint64) (path string, local uint64, ok bool)
}

// ExplainBatch makes the rank's next batch into dst (BatchSize lines of
// LineTokens), as NextBatch does, and returns where each piece of its lines
// came from, in line and column order.
func (r *Rank) ExplainBatch(dst []int32) (Produced, []Piece, error) {
	var trace batchTrace
	r.out.copying(dst, r.corpus.cfg.LineTokens(), nil)
	r.out.trace = &trace
	p, err := r.nextBatch()
	r.out.trace = nil
	if err != nil || p.Lines == 0 {
		return p, nil, err
	}
	names := namer{fr: &r.fr, units: map[spanKey]unitDocs{}}
	id := BatchID(r.corpus.JobFingerprint(), r.step, r.dpRank, r.dpSize)
	var out []Piece
	for i, l := range trace.lines {
		for _, pc := range l.pieces {
			named, err := names.pieces(l.from, pc)
			if err != nil {
				return p, nil, err
			}
			for _, np := range named {
				np.BatchID, np.Step, np.DPRank, np.Line = id, r.step, r.dpRank, i
				out = append(out, np)
			}
		}
	}
	return p, out, nil
}

// docSpan is one document of a unit: tokens [start, end) of the unit, of
// which head (its BOS) and tail (its EOS) are framing.
type docSpan struct {
	start, end uint64
	head, tail uint64
}

// unitDocs is a unit of several documents: their spans, and each one's
// place in the file when known (places nil otherwise).
type unitDocs struct {
	spans  []docSpan
	places []text.Record
}

type spanKey struct {
	ds   *shardedSource
	unit uint64
}

// namer names the pieces of a batch; it keeps the documents of the units
// of several documents it has split.
type namer struct {
	fr    *framing
	units map[spanKey]unitDocs
}

// pieces names a piece of a line taken from shard s: one Piece for each
// document it holds part of.
func (n *namer) pieces(s *shard, pc piece) ([]Piece, error) {
	ds := s.ds
	base := Piece{Dataset: ds.name, Shard: s.index, Unit: pc.f.unit, Document: -1, Blocked: pc.blocked}
	if l, ok := ds.src.(unitLocator); ok {
		if path, local, ok := l.LocateUnit(pc.f.unit); ok {
			base.File, base.FileUnit = path, local
		}
	}
	ud := unitDocs{spans: []docSpan{{start: 0, end: pc.f.len(), head: uint64(pc.f.head), tail: uint64(pc.f.tail)}}}
	if ds.src.Delimited() {
		var err error
		if ud, err = n.split(ds, pc.f); err != nil {
			return nil, err
		}
	} else {
		base.Document = int64(base.FileUnit)
	}
	var out []Piece
	lo, hi := pc.off, pc.off+pc.n
	for k, sp := range ud.spans {
		if sp.end <= lo || sp.start >= hi || sp.end == sp.start {
			continue
		}
		a, b := max(lo, sp.start)-sp.start, min(hi, sp.end)-sp.start
		body := sp.end - sp.start - sp.head - sp.tail
		np := base
		np.ColumnStart = int(pc.at + (max(lo, sp.start) - lo))
		np.ColumnEnd = np.ColumnStart + int(b-a)
		np.UnitDocument = uint64(k)
		np.BOS, np.EOS = a < sp.head, b > sp.head+body
		np.TokenStart = min(max(a, sp.head)-sp.head, body)
		np.TokenEnd = max(min(b, sp.head+body)-sp.head, np.TokenStart)
		if ud.places != nil {
			np.JSONLLine = ud.places[k].Line
			if np.JSONLLine == 0 {
				row := ud.places[k].Row
				np.ParquetRow = &row
			}
		}
		out = append(out, np)
	}
	return out, nil
}

// split cuts a unit of several documents (a delimited source's) into them:
// each ends after an EOS token, the last one at the unit's end; a text
// unit's documents start with the BOS its tokenizing put first, when the
// config has one. A text source places them in the file, where it can and
// its documents are as many as the EOS tokens say (a text that tokenizes
// to an EOS inside it is cut there, as the batch's document_ids cut it).
func (n *namer) split(ds *shardedSource, f frame) (unitDocs, error) {
	key := spanKey{ds, f.unit}
	if ud, ok := n.units[key]; ok {
		return ud, nil
	}
	toks := make([]int32, f.body)
	if err := ds.src.Read(f.unit, 0, toks); err != nil {
		return unitDocs{}, fmt.Errorf("dataset %q unit %d: %w", ds.name, f.unit, err)
	}
	var spans []docSpan
	start := uint64(0)
	for i, t := range toks {
		if t == n.fr.eos || i == len(toks)-1 {
			sp := docSpan{start: start, end: uint64(i) + 1}
			if t == n.fr.eos {
				sp.tail = 1
			}
			if ds.lazy && n.fr.hasBOS && toks[start] == n.fr.bos && sp.end-sp.start > sp.tail {
				sp.head = 1
			}
			spans = append(spans, sp)
			start = uint64(i) + 1
		}
	}
	ud := unitDocs{spans: spans}
	if p, ok := ds.src.(recordPlacer); ok {
		places, ok, err := p.Records(f.unit)
		if err != nil {
			return unitDocs{}, fmt.Errorf("dataset %q unit %d: %w", ds.name, f.unit, err)
		}
		if ok && len(places) == len(spans) {
			ud.places = places
		}
	}
	n.units[key] = ud
	return ud, nil
}
