package files

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tree makes a root and a directory outside it, each holding a file "f".
func tree(t *testing.T) (root, outside string, r *Roots) {
	t.Helper()
	base := t.TempDir()
	root, outside = filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{root, outside} {
		write(t, filepath.Join(d, "f"), d)
	}
	r, err := NewRoots([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	return root, outside, r
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// wantOutside checks that err is an outside error naming what and path.
func wantOutside(t *testing.T, err error, what, path string) {
	t.Helper()
	var oe *OutsideError
	if !errors.Is(err, ErrOutsideRoots) || !errors.As(err, &oe) {
		t.Fatalf("err = %v, want an outside error", err)
	}
	if want := what + " " + `"` + path + `"`; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "is not under any --allow-root (") {
		t.Errorf("err = %q, want it to name %s", err, want)
	}
}

func TestCheck(t *testing.T) {
	root, outside, r := tree(t)
	for _, p := range []string{root, filepath.Join(root, "f"), filepath.Join(root, "new", "deeper"), filepath.Join(root, "*.bin")} {
		if err := r.Check("x", p); err != nil {
			t.Errorf("Check(%s): %v", p, err)
		}
	}
	err := r.Check("save folder", outside)
	wantOutside(t, err, "save folder", outside)
	if want := `path outside every allowed root: save folder "` + outside + `" is not under any --allow-root (` + root + ")"; err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
	wantOutside(t, r.Check("p", filepath.Join(root, "..", "outside", "*.bin")), "p", filepath.Join(root, "..", "outside"))
	link := filepath.Join(root, "out")
	symlink(t, outside, link)
	err = r.Check("p", filepath.Join(link, "new"))
	wantOutside(t, err, "p", filepath.Join(link, "new"))
	if !strings.Contains(err.Error(), "resolves to") {
		t.Errorf("err = %q does not say where the link leads", err)
	}
	for _, none := range []*Roots{nil, {}} {
		if err := none.Check("p", outside); err != nil {
			t.Errorf("no roots: %v", err)
		}
	}
}

func TestOpenFollowsLinksInsideOnly(t *testing.T) {
	root, outside, r := tree(t)
	symlink(t, filepath.Join(root, "f"), filepath.Join(root, "abs-in")) // os.Root alone refuses absolute links
	symlink(t, "f", filepath.Join(root, "rel-in"))
	symlink(t, filepath.Join(outside, "f"), filepath.Join(root, "abs-out"))
	symlink(t, "../outside/f", filepath.Join(root, "rel-out"))
	symlink(t, outside, filepath.Join(root, "dir-out"))
	for _, name := range []string{"f", "abs-in", "rel-in"} {
		b, err := r.ReadFile("x", filepath.Join(root, name))
		if err != nil || string(b) != root {
			t.Errorf("ReadFile(%s) = %q, %v", name, b, err)
		}
	}
	for _, name := range []string{"abs-out", "rel-out", "dir-out/f"} {
		_, err := r.ReadFile("x", filepath.Join(root, name))
		wantOutside(t, err, "x", filepath.Join(root, name))
	}
	_, err := r.Open("x", filepath.Join(root, "missing"))
	if want := "open " + filepath.Join(root, "missing") + ": no such file or directory"; err == nil || err.Error() != want {
		t.Errorf("missing file: %v, want %q", err, want)
	}
	if _, err := r.Stat("x", filepath.Join(root, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Stat of a missing file: %v", err)
	}
}

// TestSwapAfterCheck swaps a directory for a symlink out of the root after
// the path was checked and before it is opened: the open is refused.
func TestSwapAfterCheck(t *testing.T) {
	root, outside, r := tree(t)
	write(t, filepath.Join(root, "d", "f"), "inside")
	p, err := r.locate("x", filepath.Join(root, "d", "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	if err := os.Rename(filepath.Join(root, "d"), filepath.Join(root, "d.old")); err != nil {
		t.Fatal(err)
	}
	symlink(t, outside, filepath.Join(root, "d"))
	f, err := p.open()
	if err == nil {
		f.Close()
		t.Fatal("opened through a symlink swapped in after the check")
	}
	wantOutside(t, err, "x", filepath.Join(root, "d", "f"))
}

func TestEscapeIsRecognised(t *testing.T) {
	root, err := os.OpenRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	_, err = root.Open("../x")
	var pe *os.PathError
	if !errors.As(err, &pe) || !escapes(pe.Err) {
		t.Fatalf("os.Root's error for an escape is %v; escapes does not know it", err)
	}
}

func TestFolder(t *testing.T) {
	root, outside, r := tree(t)
	if _, err := r.Folder("save folder", outside); err == nil {
		t.Fatal("a folder outside the roots was accepted")
	} else {
		wantOutside(t, err, "save folder", outside)
	}
	for _, roots := range []*Roots{r, nil} {
		f, err := roots.Folder("save folder", filepath.Join(root, "ckpt"))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.MkdirAll("dataloader"); err != nil {
			t.Fatal(err)
		}
		for _, content := range []string{"one", "two"} {
			if err := f.WriteFileAtomic("dataloader/s.json", []byte(content)); err != nil {
				t.Fatal(err)
			}
			if b, err := f.ReadFile("dataloader/s.json", MaxStateFile); err != nil || string(b) != content {
				t.Fatalf("read back %q, %v; want %q", b, err, content)
			}
		}
		entries, err := f.ReadDir("dataloader")
		if err != nil || len(entries) != 1 || entries[0].Name() != "s.json" {
			t.Fatalf("ReadDir = %v, %v; want s.json alone (no temp file)", entries, err)
		}
		if err := os.RemoveAll(filepath.Join(root, "ckpt")); err != nil {
			t.Fatal(err)
		}
	}
	// A checkpoint folder whose dataloader/ leads out of the roots.
	if err := os.MkdirAll(filepath.Join(root, "ckpt"), 0o755); err != nil {
		t.Fatal(err)
	}
	symlink(t, outside, filepath.Join(root, "ckpt", "dataloader"))
	f, err := r.Folder("resume_from", filepath.Join(root, "ckpt"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.ReadDir("dataloader")
	wantOutside(t, err, "resume_from", filepath.Join(root, "ckpt", "dataloader"))
	_, err = f.ReadFile("dataloader/f", MaxStateFile)
	wantOutside(t, err, "resume_from", filepath.Join(root, "ckpt", "dataloader", "f"))
	err = f.WriteFileAtomic("dataloader/s.json", []byte("x"))
	wantOutside(t, err, "resume_from", filepath.Join(root, "ckpt", "dataloader"))
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Errorf("outside holds %d entries after a refused write", len(entries))
	}
}

// TestSaveSweepsStaleTemps: an atomic write removes the temp files that
// killed writes into its directory left, once stale; a fresh one (a write
// that may be under way) and files that are no temp files stay. Before,
// every kill mid-save left a .rank-*.tmp* file for good.
func TestSaveSweepsStaleTemps(t *testing.T) {
	root, _, r := tree(t)
	dir := filepath.Join(root, "ckpt", "run", "dataloader")
	if err := r.MkdirAll("save folder", dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, ".rank-0-of-2.json.tmp0123456789abcdef")
	fresh := filepath.Join(dir, ".rank-0-of-2.json.tmpfedcba9876543210")
	other := filepath.Join(dir, ".rank-1-of-2.json.tmp0123456789abcdef")
	notTemp := filepath.Join(dir, ".rank-1-of-2.json.tmp-notes")
	old := time.Now().Add(-time.Hour)
	for _, p := range []string{stale, fresh, other, notTemp} {
		write(t, p, "{")
		if p != fresh {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := r.WriteFileAtomic("save folder", filepath.Join(dir, "rank-0-of-2.json"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{stale, other} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("the stale temp file %s is still there", p)
		}
	}
	for _, p := range []string{fresh, notTemp} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// TestSaveNamesNothingUntilWritten: an atomic write gives its data a name
// only once it is written and synced (O_TMPFILE, then a link), so a writer
// killed while it writes leaves no temp file; where O_TMPFILE is missing it
// falls back to a named temp file, and both end in the same file.
func TestSaveNamesNothingUntilWritten(t *testing.T) {
	root, _, r := tree(t)
	dir := filepath.Join(root, "ckpt", "step-7", "dataloader")
	if err := r.MkdirAll("save folder", dir, 0o755); err != nil {
		t.Fatal(err)
	}
	names := func() []string {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range entries {
			out = append(out, e.Name())
		}
		return out
	}
	linked := 0
	path := filepath.Join(dir, "rank-0-of-1.json")
	beforeLink = func() {
		linked++
		for _, n := range names() {
			if n != filepath.Base(path) {
				t.Errorf("before the link the folder holds %s: a kill here would leave it", n)
			}
		}
	}
	defer func() { beforeLink = nil }()
	// A first write links the file in under its name; a second replaces it.
	for i, body := range []string{`{"a":1}`, `{"a":11}`} {
		if err := r.WriteFileAtomic("save folder", path, []byte(body)); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != body {
			t.Fatalf("write %d: %q, %v", i, b, err)
		}
		if got := names(); len(got) != 1 {
			t.Fatalf("write %d left %v", i, got)
		}
	}
	if linked != 2 {
		t.Fatalf("the unnamed write ran %d times of 2 (O_TMPFILE not used on this filesystem?)", linked)
	}
	saved := openUnnamed
	openUnnamed = func(int) (int, error) { return -1, unix.EOPNOTSUPP }
	defer func() { openUnnamed = saved }()
	if err := r.WriteFileAtomic("save folder", path, []byte(`{"a":2}`)); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != `{"a":2}` {
		t.Fatalf("after the named fallback: %q, %v", b, err)
	}
	if got := names(); len(got) != 1 || got[0] != "rank-0-of-1.json" {
		t.Fatalf("the folder holds %v, want the rank file alone", got)
	}
}

// TestBucketRoots: an s3:// root allows the objects under its prefix and
// nothing else; a local path is refused once only bucket roots are given;
// state folders are never objects.
func TestBucketRoots(t *testing.T) {
	r, err := NewRoots([]string{"s3://b/data"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		ok   bool
	}{
		{"s3://b/data/x.bin", true},
		{"s3://b/data/sub/x.bin", true},
		{"s3://b/data/*.bin", true},
		{"s3://b/data", true},
		{"s3://b/database/x.bin", false},
		{"s3://b/da*", false},
		{"s3://c/data/x.bin", false},
		{"/data/x.bin", false},
	} {
		err := r.Check(`dataset "d" path`, c.path)
		if c.ok && err != nil {
			t.Errorf("%s: refused: %v", c.path, err)
		}
		if !c.ok && !errors.Is(err, ErrOutsideRoots) {
			t.Errorf("%s: got %v, want ErrOutsideRoots", c.path, err)
		}
		if !c.ok && err != nil && !strings.Contains(err.Error(), "s3://b/data") {
			t.Errorf("%s: the error does not list the roots: %v", c.path, err)
		}
	}
	if _, err := r.Folder("save folder", "s3://b/data/ckpt"); err == nil || !strings.Contains(err.Error(), "local") {
		t.Errorf("an s3:// save folder: got %v", err)
	}
	if _, err := NewRoots([]string{"s3://"}); err == nil {
		t.Error(`NewRoots("s3://") accepted a root without a bucket`)
	}
	// Without roots every bucket is allowed, and without a store a dataset
	// in one is refused with a reason.
	var none *Roots
	if err := none.Check("p", "s3://any/x"); err != nil {
		t.Errorf("no roots: %v", err)
	}
	if _, err := (Dataset{Name: "d"}).Load("s3://any/x"); err == nil || !strings.Contains(err.Error(), "not enabled") {
		t.Errorf("no object store: got %v", err)
	}
}
