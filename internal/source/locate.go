package source

// LocateUnit names the file that holds unit u (for Megatron its .bin) and
// u's number in it: the document's index for Megatron and Arrow files, the
// block's for flat token files. For dataloaderd explain; u < Units(); ok
// is always true.
func (d *concatSource) LocateUnit(u uint64) (path string, local uint64, ok bool) {
	i, local := d.locate(u)
	return d.parts[i].files()[0].Path, local, true
}
