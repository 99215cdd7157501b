// Package sourcetest is the contract of source.Source as one suite of tests,
// run against every format (see formats_test.go), in the manner of
// containerd's content test suite: a reader that breaks a promise of the
// interface fails here whatever its format.
package sourcetest

import (
	"errors"
	"math/rand"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/source"
)

// Corpus is an opened source and what it must hold.
type Corpus struct {
	// Source is the source under test; the suite closes it.
	Source source.Source
	// Docs are the documents written, in order. A Delimited source's units
	// hold them each followed by EOS; another's units are them, one each.
	Docs [][]int32
	// EOS ends each document in the units of a Delimited source.
	EOS int32
	// Files are the paths Files must list, in order.
	Files []string
	// Estimated is true when Tokens and Offset are estimates (text formats,
	// whose token counts are only known by tokenizing), not exact counts.
	Estimated bool
}

// Run runs the suite; open writes the documents, opens them as a Source and
// is called once for each test.
func Run(t *testing.T, open func(t *testing.T) Corpus) {
	for _, test := range []struct {
		name string
		run  func(*testing.T, Corpus)
	}{
		{"Offsets", testOffsets},
		{"Documents", testDocuments},
		{"UnitLenAgreesWithRead", testUnitLen},
		{"ReadsInsideUnits", testPartialReads},
		{"OutOfRange", testOutOfRange},
		{"Files", testFiles},
		{"CloseTwice", testCloseTwice},
	} {
		t.Run(test.name, func(t *testing.T) {
			c := open(t)
			if test.name != "CloseTwice" {
				t.Cleanup(func() {
					if err := c.Source.Close(); err != nil {
						t.Errorf("Close: %v", err)
					}
				})
			}
			test.run(t, c)
		})
	}
	t.Run("ConcurrentReads", func(t *testing.T) { testConcurrentReads(t, open) })
}

// units reads every unit whole.
func units(t *testing.T, src source.Source) [][]int32 {
	t.Helper()
	out := make([][]int32, src.Units())
	for u := range out {
		n, err := src.UnitLen(uint64(u))
		if err != nil {
			t.Fatalf("UnitLen(%d): %v", u, err)
		}
		out[u] = make([]int32, n)
		if err := src.Read(uint64(u), 0, out[u]); err != nil {
			t.Fatalf("Read(%d, 0, %d tokens): %v", u, n, err)
		}
	}
	return out
}

// testOffsets: Offset runs monotone from 0 to Offset(Units()) == Tokens(),
// which counts every unit's tokens unless the format only estimates it.
func testOffsets(t *testing.T, c Corpus) {
	src := c.Source
	if src.Units() == 0 {
		t.Fatal("no units")
	}
	if got := src.Offset(0); got != 0 {
		t.Errorf("Offset(0) = %d, want 0", got)
	}
	if got := src.Offset(src.Units()); got != src.Tokens() {
		t.Errorf("Offset(Units()) = %d, want Tokens() = %d", got, src.Tokens())
	}
	for u := range src.Units() {
		if a, b := src.Offset(u), src.Offset(u+1); a > b {
			t.Errorf("Offset(%d) = %d > Offset(%d) = %d", u, a, u+1, b)
		}
	}
	if c.Estimated {
		return
	}
	var total uint64
	for _, unit := range units(t, src) {
		total += uint64(len(unit))
	}
	if total != src.Tokens() {
		t.Errorf("units hold %d tokens; Tokens() = %d", total, src.Tokens())
	}
}

// testDocuments: the units, read in order, are exactly the documents.
func testDocuments(t *testing.T, c Corpus) {
	got := units(t, c.Source)
	if !c.Source.Delimited() {
		if !slices.EqualFunc(got, c.Docs, slices.Equal) {
			t.Fatalf("units = %v, want the documents %v", got, c.Docs)
		}
		return
	}
	var want []int32
	for _, d := range c.Docs {
		want = append(append(want, d...), c.EOS)
	}
	if all := slices.Concat(got...); !slices.Equal(all, want) {
		t.Fatalf("units hold %v, want the documents each ended by EOS %d: %v", all, c.EOS, want)
	}
	for u, unit := range got {
		if len(unit) > 0 && unit[len(unit)-1] != c.EOS {
			t.Errorf("unit %d ends inside a document: %v", u, unit)
		}
	}
}

// testUnitLen: a read of UnitLen tokens succeeds, one more fails.
func testUnitLen(t *testing.T, c Corpus) {
	for u := range c.Source.Units() {
		n, err := c.Source.UnitLen(u)
		if err != nil {
			t.Fatalf("UnitLen(%d): %v", u, err)
		}
		if err := c.Source.Read(u, 0, make([]int32, n)); err != nil {
			t.Errorf("Read(%d) of its UnitLen %d tokens: %v", u, n, err)
		}
		if err := c.Source.Read(u, 0, make([]int32, n+1)); err == nil {
			t.Errorf("Read(%d) of %d tokens, one past UnitLen, succeeded", u, n+1)
		}
	}
}

// testPartialReads: a read at any offset inside a unit gives that part of it.
func testPartialReads(t *testing.T, c Corpus) {
	for u, unit := range units(t, c.Source) {
		n := len(unit)
		for _, off := range []int{0, 1, n / 2, n - 1, n} {
			if off < 0 || off > n {
				continue
			}
			for _, length := range []int{n - off, min(1, n-off), (n - off) / 2} {
				got := make([]int32, length)
				if err := c.Source.Read(uint64(u), uint64(off), got); err != nil {
					t.Fatalf("Read(%d, %d, %d tokens): %v", u, off, length, err)
				}
				if want := unit[off : off+length]; !slices.Equal(got, want) {
					t.Fatalf("Read(%d, %d, %d tokens) = %v, want %v", u, off, length, got, want)
				}
			}
		}
	}
}

// testOutOfRange: units past the end and reads past a unit's end are
// errors, and not errors of bad input (they are the caller's).
func testOutOfRange(t *testing.T, c Corpus) {
	src := c.Source
	check := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s succeeded", what)
		} else if errors.Is(err, source.ErrInvalid) {
			t.Errorf("%s: %v wraps ErrInvalid", what, err)
		}
	}
	_, err := src.UnitLen(src.Units())
	check("UnitLen(Units())", err)
	check("Read(Units())", src.Read(src.Units(), 0, nil))
	check("Read(Units()+7)", src.Read(src.Units()+7, 0, make([]int32, 1)))
	last := src.Units() - 1
	n, err := src.UnitLen(last)
	if err != nil {
		t.Fatal(err)
	}
	check("Read at offset UnitLen+1", src.Read(last, n+1, nil))
	check("Read of one token at offset UnitLen", src.Read(last, n, make([]int32, 1)))
}

// testFiles: Files lists the dataset's files, with their sizes.
func testFiles(t *testing.T, c Corpus) {
	got := c.Source.Files()
	var paths []string
	for _, f := range got {
		paths = append(paths, f.Path)
		info, err := os.Stat(f.Path)
		if err != nil || info.Size() != f.Size {
			t.Errorf("Files() has %s of %d bytes; stat says %v, %v", f.Path, f.Size, info, err)
		}
	}
	if !slices.Equal(paths, c.Files) {
		t.Errorf("Files() = %v, want %v", paths, c.Files)
	}
}

// testCloseTwice: a second Close is harmless.
func testCloseTwice(t *testing.T, c Corpus) {
	if err := c.Source.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Source.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// testConcurrentReads: reads from many goroutines at once, in random
// orders, give what sequential reads of another opening gave. (Two
// openings, so that the concurrent reads are not served by what the
// sequential ones left behind, such as tokenized units.)
func testConcurrentReads(t *testing.T, open func(*testing.T) Corpus) {
	seq := open(t)
	want := units(t, seq.Source)
	if err := seq.Source.Close(); err != nil {
		t.Fatal(err)
	}
	c := open(t)
	defer func() {
		if err := c.Source.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewSource(int64(g)))
			for range 4 {
				for _, u := range rng.Perm(len(want)) {
					unit := want[u]
					off := rng.Intn(len(unit) + 1)
					got := make([]int32, len(unit)-off)
					if err := c.Source.Read(uint64(u), uint64(off), got); err != nil || !slices.Equal(got, unit[off:]) {
						t.Errorf("goroutine %d: Read(%d, %d) = %v, %v; want %v", g, u, off, got, err, unit[off:])
						return
					}
				}
			}
		})
	}
	wg.Wait()
}
