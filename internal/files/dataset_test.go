package files

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func format(t *testing.T, name string) Format {
	t.Helper()
	f, ok := Lookup(name)
	if !ok {
		t.Fatalf("no format %q", name)
	}
	return f
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"b.idx", "b.bin", "a.idx", "a.bin", "c.bin", "x.jsonl", "y.ndjson.gz", "z.json", "README"} {
		write(t, filepath.Join(dir, name), "x")
	}
	if err := os.Mkdir(filepath.Join(dir, "sub.bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	in := func(names ...string) []string {
		for i, n := range names {
			names[i] = filepath.Join(dir, n)
		}
		return names
	}
	d := Dataset{Name: "ds"}
	for _, tc := range []struct {
		format, path string
		want         []string
	}{
		{Megatron, dir, in("a", "b")},
		{Megatron, filepath.Join(dir, "*"), in("a", "b", "c")},
		{Megatron, filepath.Join(dir, "b"), in("b")},
		{Megatron, filepath.Join(dir, "b.bin"), in("b")},
		{Megatron, filepath.Join(dir, "a.idx"), in("a")},
		{Tokens, dir, in("a.bin", "b.bin", "c.bin")},
		{Tokens, filepath.Join(dir, "[bc].bin"), in("b.bin", "c.bin")},
		{Tokens, filepath.Join(dir, "README"), in("README")},
		{JSONL, dir, in("x.jsonl", "y.ndjson.gz")},
	} {
		got, err := d.Resolve(format(t, tc.format), tc.path)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Resolve(%s, %s) = %v, %v; want %v", tc.format, tc.path, got, err, tc.want)
		}
	}
	missing := filepath.Join(dir, "nope")
	for _, tc := range []struct {
		format, path, want string
	}{
		{Megatron, missing, `path "` + missing + `": no megatron (PREFIX.idx and PREFIX.bin) files found`},
		{Arrow, dir, `path "` + dir + `": no arrow (.arrow) files found`},
		{Tokens, filepath.Join(dir, "[x"), "syntax error in pattern"},
	} {
		_, err := d.Resolve(format(t, tc.format), tc.path)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Resolve(%s, %s): %v, want %q", tc.format, tc.path, err, tc.want)
		}
	}
}

// TestResolveConfined: a glob match, a directory entry and a Megatron .bin
// that are symlinks out of the roots are refused; links that stay inside
// are followed.
func TestResolveConfined(t *testing.T) {
	root, outside, r := tree(t)
	d := Dataset{Roots: r, Name: "web"}
	write(t, filepath.Join(outside, "evil.bin"), "tokens")
	write(t, filepath.Join(root, "real", "ok.bin"), "tokens")
	glob, dir, pair := filepath.Join(root, "glob"), filepath.Join(root, "dir"), filepath.Join(root, "pair")
	for _, sub := range []string{glob, dir, pair} {
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		symlink(t, filepath.Join(root, "real", "ok.bin"), filepath.Join(sub, "in.bin"))
	}
	symlink(t, filepath.Join(outside, "evil.bin"), filepath.Join(glob, "out.bin"))
	symlink(t, filepath.Join(outside, "evil.bin"), filepath.Join(dir, "out.bin"))
	write(t, filepath.Join(pair, "out.idx"), "index")
	symlink(t, filepath.Join(outside, "evil.bin"), filepath.Join(pair, "out.bin"))

	_, err := d.Resolve(format(t, Tokens), filepath.Join(glob, "*.bin"))
	wantOutside(t, err, `dataset "web" file`, filepath.Join(glob, "out.bin"))

	paths, err := d.Resolve(format(t, Tokens), dir)
	if err != nil || len(paths) != 2 {
		t.Fatalf("Resolve(dir) = %v, %v", paths, err)
	}
	_, err = d.Map(filepath.Join(dir, "out.bin"))
	wantOutside(t, err, `dataset "web" file`, filepath.Join(dir, "out.bin"))

	prefixes, err := d.Resolve(format(t, Megatron), filepath.Join(pair, "out"))
	if err != nil || !slices.Equal(prefixes, []string{filepath.Join(pair, "out")}) {
		t.Fatalf("Resolve(prefix) = %v, %v", prefixes, err)
	}
	_, err = d.Map(filepath.Join(pair, "out.bin"))
	wantOutside(t, err, `dataset "web" file`, filepath.Join(pair, "out.bin"))

	for _, sub := range []string{glob, dir, pair} {
		data, err := d.Map(filepath.Join(sub, "in.bin"))
		if err != nil || string(data) != "tokens" {
			t.Errorf("a link inside the root: %q, %v", data, err)
		}
		Unmap(data)
	}
	_, err = d.Resolve(format(t, Tokens), filepath.Join(outside, "*.bin"))
	wantOutside(t, err, `dataset "web" path`, outside)
	_, err = d.Resolve(format(t, Tokens), filepath.Join(outside, "evil.bin"))
	wantOutside(t, err, `dataset "web" path`, filepath.Join(outside, "evil.bin"))
}

func TestMap(t *testing.T) {
	root, _, r := tree(t)
	write(t, filepath.Join(root, "empty"), "")
	for _, roots := range []*Roots{r, nil} {
		d := Dataset{Roots: roots, Name: "m"}
		data, err := d.Map(filepath.Join(root, "f"))
		if err != nil || string(data) != root {
			t.Errorf("Map = %q, %v", data, err)
		}
		if err := Unmap(data); err != nil {
			t.Error(err)
		}
		if data, err := d.Map(filepath.Join(root, "empty")); err != nil || data != nil {
			t.Errorf("Map(empty) = %v, %v", data, err)
		}
		_, err = d.Map(root)
		var fe *FileError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), `file "`+root+`": not a regular file`) {
			t.Errorf("Map(dir) = %v", err)
		}
	}
}
