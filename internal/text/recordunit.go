package text

import (
	"bytes"
	"errors"
	"fmt"
)

// unitFinder is a part that finds the unit holding one of its records (a
// plain JSONL file by line, a Parquet file by row).
type unitFinder interface {
	unitOfRecord(n uint64) (uint64, error)
}

// UnitOfRecord is the dataset's unit holding the record at line n (from
// 1) of file (its index in Files()), a plain JSONL file, or at row n (from
// 0) of it, a Parquet file: for a blocklist that names text documents by
// their place. A plain JSONL file's lines up to n are counted, a read of
// the file from its start; a compressed one cannot say.
func (t *Tokens) UnitOfRecord(file int, n uint64) (uint64, error) {
	d, ok := t.ds.(*concatDocs)
	if !ok || file < 0 || file >= len(d.parts) {
		return 0, fmt.Errorf("file %d is not one of the dataset's", file)
	}
	f, ok := d.parts[file].(unitFinder)
	if !ok {
		return 0, errors.New("a compressed JSONL file's records have no place to name: name them by sha256")
	}
	local, err := f.unitOfRecord(n)
	return d.units.Start(file) + local, err
}

// IsParquet reports whether Files()[file] is a Parquet file (its records
// are named by row; a JSONL file's by line).
func (t *Tokens) IsParquet(file int) bool {
	d, ok := t.ds.(*concatDocs)
	if !ok || file < 0 || file >= len(d.parts) {
		return false
	}
	_, ok = d.parts[file].(*parquetFile)
	return ok
}

func (f *jsonlFile) unitOfRecord(line uint64) (uint64, error) {
	if line == 0 {
		return 0, errors.New("line 0: lines count from 1")
	}
	size := f.size()
	if err := f.blob.Hold(0, size); err != nil {
		return 0, fmt.Errorf("the file cannot be held at once to count its lines: %v", err)
	}
	defer f.blob.Release(0, size)
	pos := uint64(0)
	for k := uint64(1); k < line; k++ {
		i := bytes.IndexByte(f.data[pos:], '\n')
		if i < 0 || pos+uint64(i)+1 >= size {
			return 0, fmt.Errorf("line %d is out of range: the file has %d lines", line, k)
		}
		pos += uint64(i) + 1
	}
	if pos >= size {
		return 0, fmt.Errorf("line %d is out of range: the file has %d lines", line, line-1)
	}
	rest := f.data[pos:size]
	if i := bytes.IndexByte(rest, '\n'); i >= 0 {
		rest = rest[:i]
	}
	if text, reason := parseRecord(rest, f.field); reason != "" || text == nil {
		return 0, fmt.Errorf("line %d holds no document (%s)", line, max(reason, "a blank line"))
	}
	// Units are cut at line starts after each multiple of the block size.
	for b := pos / f.blocks; ; b-- {
		start, _, err := f.unitRange(b)
		if err != nil {
			return 0, err
		}
		if start <= pos || b == 0 {
			return b, nil
		}
	}
}

func (p *parquetFile) unitOfRecord(row uint64) (uint64, error) {
	var base uint64
	groups := p.reader.NumRowGroups()
	for g := range groups {
		n := uint64(p.reader.RowGroup(g).NumRows())
		if row < base+n {
			return uint64(g), nil
		}
		base += n
	}
	return 0, fmt.Errorf("row %d is out of range: the file has %d rows", row, base)
}
