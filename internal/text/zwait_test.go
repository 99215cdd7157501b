package text

import (
	"path/filepath"
	"testing"
	"time"
)

// TestCompressedStashNotBehindLastUnit: a decoder that skipped unit n-2 on
// its way to stream the last unit hands n-2's lines over at once, so a
// reader of n-2 never waits for the rest of the file (held here by a visit
// that blocks).
func TestCompressedStashNotBehindLastUnit(t *testing.T) {
	data := jsonlLines("text", sampleTexts(3000, 3))
	path := filepath.Join(t.TempDir(), "a.jsonl.gz")
	writeFile(t, path, gzipBytes(t, data))
	ds, z := openZ(t, path, 1000, uint64(len(data))/10) // hint too small: a large last unit
	hold, streaming := make(chan struct{}), make(chan struct{})
	go ds.Docs(z.n-1, func([]byte) error {
		select {
		case <-streaming:
		default:
			close(streaming)
		}
		<-hold
		return nil
	})
	defer close(hold)
	<-streaming
	done := make(chan error, 1)
	go func() { done <- ds.Docs(z.n-2, func([]byte) error { return nil }) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a read of unit n-2 waits for the decoder streaming the last unit")
	}
}
