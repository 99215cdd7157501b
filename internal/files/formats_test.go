package files

import (
	"slices"
	"testing"
)

func TestRegistry(t *testing.T) {
	if got, want := Names(nil), []string{Megatron, Tokens, Arrow, Parquet, JSONL}; !slices.Equal(got, want) {
		t.Errorf("Names(nil) = %v, want %v", got, want)
	}
	if got := List(Names(IsText), "and"); got != "parquet and jsonl" {
		t.Errorf("text formats: %q", got)
	}
	if got := List(Quote(Names(IsTokens)), "or"); got != `"megatron", "tokens" or "arrow"` {
		t.Errorf("token formats: %q", got)
	}
	if got := List(Names(HasField), "and"); got != "arrow, parquet and jsonl" {
		t.Errorf("formats with a field: %q", got)
	}
	if _, ok := Lookup("csv"); ok {
		t.Error("Lookup(csv) found a format")
	}
	f, ok := Lookup(JSONL)
	if !ok || !f.Text || f.Field != TextField || !hasExt("a.ndjson.zst", f.Exts) || hasExt("a.json", f.Exts) {
		t.Errorf("Lookup(jsonl) = %+v, %v", f, ok)
	}
	f.Exts[0] = "changed"
	if g, _ := Lookup(JSONL); g.Exts[0] == "changed" {
		t.Error("Lookup returns the registry's own slice")
	}
	if List(nil, "or") != "" || List([]string{"a"}, "or") != "a" {
		t.Error("List of 0 or 1 words")
	}
}

func TestConcat(t *testing.T) {
	units := []uint64{2, 0, 3, 0}
	sizes := []uint64{10, 0, 7, 1}
	c := NewConcat(len(units), func(i int) (uint64, uint64) { return units[i], sizes[i] })
	if c.Files() != 4 || c.Units() != 5 || c.Size() != 18 {
		t.Fatalf("Files, Units, Size = %d, %d, %d", c.Files(), c.Units(), c.Size())
	}
	want := [][2]uint64{{0, 0}, {0, 1}, {2, 0}, {2, 1}, {2, 2}}
	for u, w := range want {
		if i, local := c.Locate(uint64(u)); uint64(i) != w[0] || local != w[1] {
			t.Errorf("Locate(%d) = %d, %d; want %d, %d", u, i, local, w[0], w[1])
		}
	}
	if c.Start(2) != 2 || c.Base(2) != 10 || c.Start(4) != 5 || c.Base(4) != 18 {
		t.Errorf("Start, Base of file 2 = %d, %d", c.Start(2), c.Base(2))
	}
	if e := NewConcat(0, nil); e.Units() != 0 || e.Size() != 0 || e.Files() != 0 {
		t.Errorf("empty Concat: %+v", e)
	}
}
