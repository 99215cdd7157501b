package text

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
