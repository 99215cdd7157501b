// Package source reads the token corpora a dataset names: Megatron indexed
// datasets, flat token files and Arrow IPC files of token lists. Every format presents a dataset as a sequence
// of units (documents, or for flat files blocks of whole documents) in file
// order, readable at any token offset, so that the stream package can cut
// shards, permute units and pack lines without building an index.
//
// Opening a dataset reads headers and indices only; token data is memory-mapped
// and read when a unit is read.
package source

import (
	"context"

	"github.com/dataloaderd/dataloaderd/internal/errkind"
	"github.com/dataloaderd/dataloaderd/internal/files"
)

// ErrInvalid marks every error caused by bad input: a missing path, an empty
// dataset, a corrupt or truncated file, an unknown format. The message names
// the file, field or value and what was expected.
var ErrInvalid = errkind.New(errkind.Invalid, "invalid dataset")

// Source is one dataset's units, concatenated over its files in path order.
// Implementations are safe for concurrent use by many readers.
type Source interface {
	// Units is the number of units.
	Units() uint64
	// Tokens is the number of tokens in all units.
	Tokens() uint64
	// Offset is the position of unit u's first token in the dataset's token
	// stream, for u in [0, Units()]; Offset(Units()) == Tokens(). It may be
	// approximate for formats whose unit boundaries are only found by reading
	// (flat files), but it is monotone and cheap (O(log files) at most): it is
	// only used to cut shards balanced by tokens.
	Offset(u uint64) uint64
	// UnitLen is the exact number of tokens in unit u.
	UnitLen(u uint64) (uint64, error)
	// Read copies tokens [off, off+len(dst)) of unit u into dst.
	Read(u uint64, off uint64, dst []int32) error
	// Delimited reports whether units already carry their document separators
	// (flat token files, split on eos_id). Units of other formats are whole
	// documents that the packer joins with EOS (and optional BOS).
	Delimited() bool
	// Files lists the dataset's files and their sizes, for the fingerprint of
	// saved state.
	Files() []File
	// Close unmaps the files.
	Close() error
}

// File is one file of a dataset, as the fingerprint records it.
type File struct {
	Path string
	Size int64
}

// Spec is what a dataset entry of the job config says about its files.
type Spec struct {
	// Name is the dataset's name in the config, used in errors.
	Name string
	// Path is a file prefix (Megatron: PREFIX.bin and PREFIX.idx), a file, a
	// directory, or a glob.
	Path string
	// Format is one of the token formats of the registry: files.Megatron,
	// files.Tokens or files.Arrow.
	Format string
	// Dtype is the token type of flat token files without an llm.c header:
	// "uint16" (default) or "uint32".
	Dtype string
	// EOS is the document separator of flat token files.
	EOS int64
	// BlockTokens is the nominal size of a flat-file unit; 0 picks the default.
	BlockTokens uint64
	// Column is the token column of Arrow IPC files: list or large_list of
	// integers (one row per document), or an integer column (one record
	// batch per document). Empty means DefaultArrowColumn.
	Column string
	// Roots confines the files the dataset may open; nil confines nothing.
	Roots *files.Roots
	// Context bounds the requests to object storage made for the dataset
	// (files.Dataset.Context): its listing, HEADs and opens, and every read
	// of its objects' bytes. Nil is context.Background().
	Context context.Context
	// OffsetProbes, when set, names the units the opener reads first,
	// for a source of units units and tokens tokens: entries, whose whole
	// entries it reads (the first units of its shards), and offsets,
	// whose offsets alone it reads (where it cuts its runs). A dataset of
	// one Megatron file whose index is in object storage guesses both
	// counts from its objects' sizes and fetches what those need together
	// with its header: one round trip to the store, not three
	// (megatronguess.go). A hint: a wrong guess costs a few blocks
	// fetched, never a result.
	OffsetProbes CutProbes
}

// CutProbes is Spec.OffsetProbes: for a source of units units and tokens
// tokens, the units whose entries and those whose offsets its opener
// reads first.
type CutProbes func(units, tokens uint64) (entries, offsets []uint64)
