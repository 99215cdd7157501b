package text

import (
	"bytes"
	"errors"
)

// fileLocator is a Dataset that names the file of a unit (concatDocs).
type fileLocator interface {
	LocateUnit(u uint64) (path string, local uint64)
}

// LocateUnit names the file that holds unit u and u's number in it: the
// byte block of a JSONL file, the row group of a Parquet file. For
// dataloaderd explain; u < Units().
func (d *concatDocs) LocateUnit(u uint64) (path string, local uint64) {
	i, local := d.locate(u)
	return d.parts[i].file().Path, local
}

// LocateUnit is the dataset's LocateUnit; ok is false for a dataset that
// cannot say.
func (t *Tokens) LocateUnit(u uint64) (path string, local uint64, ok bool) {
	l, ok := t.ds.(fileLocator)
	if !ok {
		return "", 0, false
	}
	path, local = l.LocateUnit(u)
	return path, local, true
}

// Record is where a document of a text unit lies in its file: its line
// (from 1) in a JSONL file, or its row (from 0) in a Parquet file.
type Record struct {
	Line uint64
	Row  uint64
}

// recordLocator is a part that places the records of a unit that docs
// visits (a plain JSONL file, a Parquet file).
type recordLocator interface {
	records(u uint64) ([]Record, error)
}

// Records places in its file each document of unit u that the unit's
// tokens hold, in order (bad records skipped, as a read skips them); ok is
// false where the file cannot say cheaply (a compressed JSONL file). A
// JSONL unit's lines are counted from the file's start. For dataloaderd
// explain.
func (t *Tokens) Records(u uint64) (recs []Record, ok bool, err error) {
	d, isConcat := t.ds.(*concatDocs)
	if !isConcat || u >= d.Units() {
		return nil, false, nil
	}
	i, local := d.locate(u)
	l, ok := d.parts[i].(recordLocator)
	if !ok {
		return nil, false, nil
	}
	recs, err = l.records(local)
	if errors.Is(err, errNoRecords) {
		return nil, false, nil
	}
	return recs, err == nil, err
}

// errNoRecords is a part's answer where it cannot place a unit's records.
var errNoRecords = errors.New("text: the records of the unit cannot be placed")

func (f *jsonlFile) records(b uint64) ([]Record, error) {
	start, end, err := f.unitRange(b)
	if err != nil {
		return nil, err
	}
	if err := f.blob.Hold(0, end); err != nil {
		return nil, errNoRecords // a file in object storage larger than the cache holds at once
	}
	defer f.blob.Release(0, end)
	line := uint64(bytes.Count(f.data[:start], []byte{'\n'})) + 1
	var out []Record
	for pos := start; pos < end; line++ {
		rest := f.data[pos:end]
		next := end
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			rest, next = rest[:i], pos+uint64(i)+1
		}
		if text, reason := parseRecord(rest, f.field); reason == "" && text != nil {
			out = append(out, Record{Line: line})
		}
		pos = next
	}
	return out, nil
}

func (p *parquetFile) records(g uint64) ([]Record, error) {
	var row uint64
	for i := range int(g) {
		row += uint64(p.reader.RowGroup(i).NumRows())
	}
	var out []Record
	err := p.docs(g, func([]byte) error {
		out = append(out, Record{Row: row})
		row++
		return nil
	}, func(*BadRecordError) error {
		row++
		return nil
	})
	return out, err
}
