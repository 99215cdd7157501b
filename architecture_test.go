// The test here holds docs/architecture.md's map of the daemon's packages
// to the imports of the code, as internal/session's hold the metrics to
// docs/metrics.md.
package dataloaderd_test

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const (
	module  = "github.com/dataloaderd/dataloaderd"
	mapDoc  = "docs/architecture.md"
	mapInfo = "imports" // the info string of the map's fenced block
)

// graph is, for each package, the packages it imports and, for each
// import, a file that makes it (empty for the doc's arrows).
type graph map[string]map[string]string

// node names an import path as the map does: the module's internal/
// packages without the prefix, cmd/ as is, the generated api/ code as
// "api", gRPC as "grpc"; "" for anything else (the standard library, other
// modules).
func node(path string) string {
	switch {
	case path == "google.golang.org/grpc" || strings.HasPrefix(path, "google.golang.org/grpc/"):
		return "grpc"
	case !strings.HasPrefix(path, module+"/"):
		return ""
	}
	rel := strings.TrimPrefix(path, module+"/")
	switch {
	case strings.HasPrefix(rel, "api/"):
		return "api"
	case strings.HasPrefix(rel, "internal/"):
		return strings.TrimPrefix(rel, "internal/")
	}
	return rel
}

// codeGraph reads the imports of every package under internal/ and cmd/:
// of every file but tests (so a test's helpers draw no arrow) and files
// that no build includes (//go:build ignore).
func codeGraph(t *testing.T) graph {
	t.Helper()
	g := graph{}
	fset := token.NewFileSet()
	for _, top := range []string{"internal", "cmd"} {
		err := filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly|parser.ParseComments)
			if err != nil {
				return err
			}
			for _, c := range f.Comments {
				if c.Pos() < f.Package && strings.Contains(c.Text(), "go:build ignore") {
					return nil
				}
			}
			from := node(module + "/" + filepath.ToSlash(filepath.Dir(path)))
			if g[from] == nil {
				g[from] = map[string]string{}
			}
			for _, imp := range f.Imports {
				if to := node(strings.Trim(imp.Path.Value, `"`)); to != "" && g[from][to] == "" {
					g[from][to] = path
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("reading the packages under %s/: %v", top, err)
		}
	}
	return g
}

// docGraph reads the map: the fenced block whose info string is
// "imports", one line per package, "a -> b, c" (a imports b and c) or "a"
// alone (a imports nothing of the module's); "* -> x" says any package may
// import x (a leaf: errkind), without drawing the arrows; # starts a
// comment.
func docGraph(t *testing.T) (g graph, at map[string]string, anyMay []string) {
	t.Helper()
	f, err := os.Open(mapDoc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g, at = graph{}, map[string]string{}
	in, found := false, false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case !in && line == "```"+mapInfo:
			in, found = true, true
			continue
		case in && line == "```":
			in = false
			continue
		case !in:
			continue
		}
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" {
			continue
		}
		from, tos, _ := strings.Cut(line, "->")
		from = strings.TrimSpace(from)
		var targets []string
		for _, to := range strings.Split(tos, ",") {
			if to = strings.TrimSpace(to); to != "" {
				targets = append(targets, to)
			}
		}
		if from == "*" {
			anyMay = append(anyMay, targets...)
			continue
		}
		if _, dup := g[from]; dup || strings.ContainsAny(from, " \t") {
			t.Fatalf("%s:%d: %q: a package named twice, or not a package name", mapDoc, n, from)
		}
		g[from], at[from] = map[string]string{}, fmt.Sprintf("%s:%d", mapDoc, n)
		for _, to := range targets {
			g[from][to] = fmt.Sprintf("%s:%d", mapDoc, n)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if !found || in {
		t.Fatalf("%s: no closed ```%s block (the map of the packages)", mapDoc, mapInfo)
	}
	return g, at, anyMay
}

// TestArchitectureMap: docs/architecture.md's map names every package under
// internal/ and cmd/ and every import between them (and of gRPC and the
// generated API), and no arrow the code does not have.
func TestArchitectureMap(t *testing.T) {
	code := codeGraph(t)
	doc, at, anyMay := docGraph(t)
	for _, leaf := range anyMay {
		if len(code[leaf]) > 0 {
			t.Errorf("%s: any package may import %s, but it imports %v: only a leaf may be imported by all", mapDoc, leaf, keys(code[leaf]))
		}
	}
	for _, pkg := range keys(code) {
		if _, ok := doc[pkg]; !ok {
			t.Errorf("%s: the map has no line for %s (a package under internal/ or cmd/)", mapDoc, pkg)
			continue
		}
		for _, to := range keys(code[pkg]) {
			if _, ok := doc[pkg][to]; !ok && !slices.Contains(anyMay, to) {
				t.Errorf("%s: the map lacks the arrow %s -> %s, which %s imports", mapDoc, pkg, to, code[pkg][to])
			}
		}
	}
	for _, pkg := range keys(doc) {
		if _, ok := code[pkg]; !ok {
			t.Errorf("%s: the map has %s, but no such package is under internal/ or cmd/", at[pkg], pkg)
			continue
		}
		for _, to := range keys(doc[pkg]) {
			if _, ok := code[pkg][to]; !ok {
				t.Errorf("%s: the map shows %s -> %s, but no file of %s imports it", doc[pkg][to], pkg, to, pkg)
			}
		}
	}
}

// keys is m's keys, sorted.
func keys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
