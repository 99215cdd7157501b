package text

import (
	"bytes"
	"path/filepath"
	"testing"
	"time"
)

type panicEncoder struct{ byteEncoder }

func (e *panicEncoder) Encode(dst []int32, text []byte) []int32 {
	if bytes.Contains(text, []byte("BOOM")) {
		panic("tokenizer bug")
	}
	return e.byteEncoder.Encode(dst, text)
}

// TestCompressedTokenizerPanicReleasesDecoder: a tokenizer that panics while
// the last unit is streamed (Cache turns the panic into an error) still
// hands the decoder back, so later reads of the file do not wait for it.
func TestCompressedTokenizerPanicReleasesDecoder(t *testing.T) {
	texts := append(sampleTexts(400, 3), "BOOM")
	data := jsonlLines("text", texts)
	path := filepath.Join(t.TempDir(), "a.jsonl.gz")
	writeFile(t, path, gzipBytes(t, data))
	ds, z := openZ(t, path, 1000, 0)
	src := Tokenized(ds, &panicEncoder{}, Framing{EOS: 0}, NewCache(64<<20), nil)
	if _, err := src.UnitLen(z.n - 1); err == nil {
		t.Fatal("want the panic as an error")
	} else {
		t.Logf("last unit: %v", err)
	}
	done := make(chan error, 1)
	go func() { _, err := src.UnitLen(z.n - 2); done <- err }()
	select {
	case err := <-done:
		t.Logf("unit n-2: %v", err)
	case <-time.After(5 * time.Second):
		ds.pool.mu.Lock()
		for _, c := range ds.pool.cursors {
			t.Logf("cursor busy=%v from=%d target=%d", c.busy, c.from, c.target)
		}
		ds.pool.mu.Unlock()
		t.Fatal("reading unit n-2 hangs: the cursor of the panicked stream was never released")
	}
}
