package text

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/source"
)

// byteEncoder tokenizes each byte b as b+1, so 0 is free for EOS.
type byteEncoder struct{ calls atomic.Int64 }

func (e *byteEncoder) Encode(dst []int32, text []byte) []int32 {
	e.calls.Add(1)
	for _, b := range text {
		dst = append(dst, int32(b)+1)
	}
	return dst
}

// slowEncoder is byteEncoder taking its time, to overlap workers and readers.
type slowEncoder struct{ byteEncoder }

func (e *slowEncoder) Encode(dst []int32, text []byte) []int32 {
	time.Sleep(200 * time.Microsecond)
	return e.byteEncoder.Encode(dst, text)
}

// decodeDocs splits a unit's tokens back into texts at EOS, dropping BOS.
func decodeDocs(t *testing.T, tokens []int32, frame Framing) []string {
	t.Helper()
	var docs []string
	var cur []byte
	atStart := true
	for _, tok := range tokens {
		switch {
		case frame.HasBOS && atStart:
			if tok != frame.BOS {
				t.Fatalf("document does not start with BOS %d: %d", frame.BOS, tok)
			}
			atStart = false
		case tok == frame.EOS:
			docs = append(docs, string(cur))
			cur, atStart = nil, true
		default:
			cur = append(cur, byte(tok-1))
		}
	}
	if len(cur) > 0 || !atStart {
		t.Fatalf("unit does not end with EOS")
	}
	return docs
}

// readAll reads every unit whole through the Source interface.
func readAll(t *testing.T, src source.Source) [][]int32 {
	t.Helper()
	units := make([][]int32, src.Units())
	for u := range src.Units() {
		n, err := src.UnitLen(u)
		if err != nil {
			t.Fatalf("UnitLen(%d): %v", u, err)
		}
		units[u] = make([]int32, n)
		if err := src.Read(u, 0, units[u]); err != nil {
			t.Fatalf("Read(%d): %v", u, err)
		}
	}
	return units
}

func jsonlDataset(t *testing.T, texts []string, block uint64) Dataset {
	path := filepath.Join(t.TempDir(), "docs.jsonl")
	writeFile(t, path, jsonlLines("text", texts))
	ds, err := Open(Spec{Name: "j", Path: path, Format: files.JSONL, BlockBytes: block})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func TestTokenizedEveryDocumentOnce(t *testing.T) {
	texts := append(sampleTexts(150, 9), "", "x")
	for _, frame := range []Framing{{EOS: 0}, {BOS: 300, EOS: 0, HasBOS: true}} {
		t.Run(fmt.Sprintf("bos=%v", frame.HasBOS), func(t *testing.T) {
			enc := &byteEncoder{}
			src := Tokenized(jsonlDataset(t, texts, 500), enc, frame, NewCache(1<<20), nil)
			defer src.Close()
			if !src.Delimited() {
				t.Errorf("Delimited() = false")
			}
			units := readAll(t, src)
			var got []string
			var total int
			for _, u := range units {
				got = append(got, decodeDocs(t, u, frame)...)
				total += len(u)
			}
			if !slices.Equal(got, texts) {
				t.Errorf("documents across units differ from the corpus:\n got %q\nwant %q", got, texts)
			}
			var want int
			for _, s := range texts {
				want += len(s) + 1
				if frame.HasBOS {
					want++
				}
			}
			if total != want {
				t.Errorf("units hold %d tokens, want %d", total, want)
			}
			if calls := enc.calls.Load(); calls != int64(len(texts)) {
				t.Errorf("encoder called %d times for %d documents; want each once (cached)", calls, len(texts))
			}
			if src.Offset(0) != 0 || src.Offset(src.Units()) != src.Tokens() {
				t.Errorf("Offset(0), Offset(Units()), Tokens() = %d, %d, %d", src.Offset(0), src.Offset(src.Units()), src.Tokens())
			}
			for u := range src.Units() {
				if src.Offset(u) > src.Offset(u+1) {
					t.Errorf("Offset not monotone at %d", u)
				}
			}
			if err := src.Read(0, uint64(len(units[0])), make([]int32, 1)); err == nil || errors.Is(err, source.ErrInvalid) {
				t.Errorf("Read past the unit's end: %v, want a range error", err)
			}
			if _, err := src.UnitLen(src.Units()); err == nil {
				t.Errorf("UnitLen(Units()) succeeded")
			}
		})
	}
}

func TestTokenizedCacheBound(t *testing.T) {
	texts := sampleTexts(200, 11)
	enc := &byteEncoder{}
	cache := NewCache(4 << 10)
	src := Tokenized(jsonlDataset(t, texts, 256), enc, Framing{EOS: 0}, cache, nil)
	defer src.Close()
	first := readAll(t, src)
	if st := cache.Stats(); st.Bytes > st.MaxBytes+4*2048 {
		t.Errorf("cache holds %d bytes, bound %d", st.Bytes, st.MaxBytes)
	}
	before := enc.calls.Load()
	if again := readAll(t, src); !slices.EqualFunc(first, again, slices.Equal) {
		t.Errorf("re-tokenized units differ")
	}
	if enc.calls.Load() == before {
		t.Errorf("no unit was evicted and tokenized again under a 4 KiB bound")
	}
	src.Close()
	if st := cache.Stats(); st.Units != 0 || st.Bytes != 0 {
		t.Errorf("after Close the cache holds %d units, %d bytes", st.Units, st.Bytes)
	}
}

// TestTokenizedConcurrent has readers and prefetching workers race over the
// same units; every unit is tokenized once and reads the same as serially.
func TestTokenizedConcurrent(t *testing.T) {
	texts := sampleTexts(400, 12)
	want := readAll(t, Tokenized(jsonlDataset(t, texts, 300), &byteEncoder{}, Framing{EOS: 0}, NewCache(1<<30), nil))
	pool := NewPool(4)
	defer pool.Close()
	enc := &slowEncoder{}
	src := Tokenized(jsonlDataset(t, texts, 300), enc, Framing{EOS: 0}, NewCache(1<<30), pool)
	defer src.Close()
	all := make([]uint64, src.Units())
	for u := range all {
		all[u] = uint64(u)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for lo := 0; lo < len(all); lo += 4 {
			src.Prefetch(all[lo:min(lo+8, len(all))])
		}
	})
	for r := range 6 {
		wg.Go(func() {
			for i := range all {
				u := uint64((i*(r+1) + r) % len(all))
				n, err := src.UnitLen(u)
				if err != nil {
					t.Error(err)
					return
				}
				got := make([]int32, n)
				if err := src.Read(u, 0, got); err != nil || !slices.Equal(got, want[u]) {
					t.Errorf("reader %d: unit %d differs from the serial tokenization (%v)", r, u, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if calls := enc.calls.Load(); calls != int64(len(texts)) {
		t.Errorf("encoder called %d times for %d documents; want each once", calls, len(texts))
	}
}

// failingDataset fails on one unit, to check that an error is not cached
// and that the readers waiting on it are released.
type failingDataset struct {
	Dataset
	fails atomic.Int64
}

func (d *failingDataset) Docs(u uint64, visit func([]byte) error) error {
	if u == 1 && d.fails.Add(1) <= 1 {
		time.Sleep(5 * time.Millisecond)
		return errors.New("transient read error")
	}
	return d.Dataset.Docs(u, visit)
}

func TestTokenizedErrorNotCached(t *testing.T) {
	ds := &failingDataset{Dataset: jsonlDataset(t, sampleTexts(50, 13), 200)}
	src := Tokenized(ds, &byteEncoder{}, Framing{EOS: 0}, NewCache(1<<20), nil)
	defer src.Close()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 4 {
		wg.Go(func() {
			if _, err := src.UnitLen(1); err != nil {
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	if failed.Load() == 0 {
		t.Errorf("no reader saw the error")
	}
	if _, err := src.UnitLen(1); err != nil {
		t.Errorf("after a failed read, UnitLen(1) = %v; want the unit tokenized anew", err)
	}
}

func TestPoolPrefetchAfterClose(t *testing.T) {
	pool := NewPool(2)
	src := Tokenized(jsonlDataset(t, sampleTexts(20, 14), 100), &byteEncoder{}, Framing{EOS: 0}, NewCache(1<<20), pool)
	defer src.Close()
	pool.Close()
	if n := src.Prefetch([]uint64{0, 1, 2}); n != 0 {
		t.Errorf("Prefetch after the pool closed queued %d units", n)
	}
}

// TestCloseWaitsForPrefetch: closing a tokenized dataset while the pool still
// tokenizes its units waits for them (the files stay mapped until then), and
// reads after Close fail instead of touching unmapped memory.
func TestCloseWaitsForPrefetch(t *testing.T) {
	for round := 0; round < 20; round++ {
		path := filepath.Join(t.TempDir(), "a.jsonl")
		var b strings.Builder
		for i := 0; i < 2000; i++ {
			fmt.Fprintf(&b, "{\"text\": \"document %d with some words in it\"}\n", i)
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		ds, err := Open(Spec{Name: "a", Path: path, Format: files.JSONL, BlockBytes: 4096})
		if err != nil {
			t.Fatal(err)
		}
		pool := NewPool(4)
		tok := Tokenized(ds, &byteEncoder{}, Framing{EOS: 0}, NewCache(1<<20), pool)
		units := make([]uint64, tok.Units())
		for i := range units {
			units[i] = uint64(i)
		}
		tok.Prefetch(units)
		if err := tok.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := tok.UnitLen(0); err == nil {
			t.Fatal("a read after Close succeeded")
		}
		pool.Close()
	}
}
