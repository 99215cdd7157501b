package stream

import (
	"slices"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/files"
)

// TestEveryFormatOpens: every format of the file layer's registry has its
// opener, of its kind (token formats by package source, text formats by
// package text), and the config's check hands it to the corpus; a name the
// registry lacks has none.
func TestEveryFormatOpens(t *testing.T) {
	for _, name := range files.Names(nil) {
		f, ok := lookupFormat(name)
		if !ok || f.open == nil || f.Name != name {
			t.Errorf("format %q: no opener (%v)", name, ok)
			continue
		}
		if got, want := f.Text, files.Names(files.IsText); got != slices.Contains(want, name) {
			t.Errorf("format %q: text %v, registry's text formats %v", name, got, want)
		}
	}
	if _, ok := lookupFormat("csv"); ok {
		t.Error("format csv has an opener")
	}
	cfg := Config{SeqLen: 7, BatchSize: 1, LogicalShards: 1, BOS: -1, Datasets: []Dataset{
		{Name: "a", Path: "a", Format: files.Megatron, Weight: 1},
		{Name: "b", Path: "b", Format: files.JSONL, Weight: 1, Tokenizer: "ints"}}}
	c, err := Check(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.formats) != 2 || c.formats[0].Name != files.Megatron || c.formats[1].Name != files.JSONL || c.formats[1].open == nil {
		t.Fatalf("checked formats %+v", c.formats)
	}
}
