package stream

import (
	"slices"
	"strings"
)

// What a batch may carry beside its tokens (Config.Metadata), each a pure
// function of the lines' cursors: where the documents of each line start and
// end, as the walk that copies the line finds them.
const (
	// MetaPositionIDs: int32 [lines, seq_len+1], each token's position in
	// its document; padding 0.
	MetaPositionIDs = "position_ids"
	// MetaDocumentIDs: int32 [lines, seq_len+1], each token's document
	// within its line, counting from 0; padding -1.
	MetaDocumentIDs = "document_ids"
	// MetaCuSeqlens: the input positions ([:, :seq_len]) of the batch
	// flattened to one sequence, cut at document boundaries, in flash-attn's
	// varlen form: int32 offsets [segments+1], and line_segments, int32
	// [lines+1], the index of each line's first segment.
	MetaCuSeqlens = "cu_seqlens"
	// MetaLossMask: uint8 [lines, seq_len], 1 where the label (the next
	// token) is to be learned: 0 for a padding label, and with
	// MaskDocumentBoundaries for a label that starts another document.
	MetaLossMask = "loss_mask"
	// MetaDatasetIDs: int32 [lines], the index in the config's datasets of
	// the dataset every token of the line came from (a line is cut from one
	// shard of one dataset); -1 for no line.
	MetaDatasetIDs = "dataset_ids"

	// PositionsRestart: a document continued from the line before counts
	// from 0 at the line's start (Megatron's reset_position_ids, torchtitan,
	// Hugging Face's flattening collator).
	PositionsRestart = "restart"
	// PositionsContinue: it counts on from its offset in the document.
	PositionsContinue = "continue"
)

// MetadataFields are the names Config.Metadata takes, in slot order.
var MetadataFields = []string{MetaPositionIDs, MetaDocumentIDs, MetaLossMask, MetaDatasetIDs, MetaCuSeqlens}

// lineSegmentsField is the second array of MetaCuSeqlens.
const lineSegmentsField = "line_segments"

func (c Config) validateMetadata() error {
	seen := map[string]bool{}
	for _, m := range c.Metadata {
		if !slices.Contains(MetadataFields, m) {
			return invalid("metadata: unknown field %q (want any of %s)", m, strings.Join(MetadataFields, ", "))
		}
		if seen[m] {
			return invalid("metadata: %q is listed twice", m)
		}
		seen[m] = true
	}
	if p := c.Positions; p != "" && p != PositionsRestart && p != PositionsContinue {
		return invalid("positions: %q (want %s or %s)", p, PositionsRestart, PositionsContinue)
	}
	if c.Positions != "" && !seen[MetaPositionIDs] {
		return invalid("positions applies to position_ids, which metadata does not list")
	}
	if c.MaskDocumentBoundaries && !seen[MetaLossMask] {
		return invalid("mask_document_boundaries applies to loss_mask, which metadata does not list")
	}
	return nil
}

// Field is one array of a batch in its slot.
type Field struct {
	Name   string
	Offset int
	// Dtype is "int32" or "uint8", little-endian.
	Dtype string
	// Shape is for a batch of BatchSize lines.
	Shape []int
}

// Layout is where a batch's arrays lie in a slot: the tokens at 0, then the
// config's metadata in MetadataFields order, each at a multiple of
// fieldAlign bytes.
type Layout struct {
	Fields []Field
	// Bytes is the slot size.
	Bytes int
}

const fieldAlign = 64

// Layout is the slot layout of the config's batches.
func (c Config) Layout() Layout {
	b, line, seq := int(c.BatchSize), c.LineTokens(), int(c.SeqLen)
	var l Layout
	add := func(name, dtype string, shape ...int) {
		size := 4
		if dtype == "uint8" {
			size = 1
		}
		for _, n := range shape {
			size *= n
		}
		l.Bytes = (l.Bytes + fieldAlign - 1) / fieldAlign * fieldAlign
		l.Fields = append(l.Fields, Field{Name: name, Offset: l.Bytes, Dtype: dtype, Shape: shape})
		l.Bytes += size
	}
	add("tokens", "int32", b, line)
	on := func(m string) bool { return slices.Contains(c.Metadata, m) }
	if on(MetaPositionIDs) {
		add(MetaPositionIDs, "int32", b, line)
	}
	if on(MetaDocumentIDs) {
		add(MetaDocumentIDs, "int32", b, line)
	}
	if on(MetaLossMask) {
		add(MetaLossMask, "uint8", b, seq)
	}
	if on(MetaDatasetIDs) {
		add(MetaDatasetIDs, "int32", b)
	}
	if on(MetaCuSeqlens) {
		add(MetaCuSeqlens, "int32", b*seq+1)
		add(lineSegmentsField, "int32", b+1)
	}
	return l
}

// field returns the named field of the layout.
func (l Layout) field(name string) (Field, bool) {
	for _, f := range l.Fields {
		if f.Name == name {
			return f, true
		}
	}
	return Field{}, false
}
