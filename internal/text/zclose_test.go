package text

import (
	"errors"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestCompressedCloseInFlight: closing a dataset while readers are in the
// middle of its compressed file ends every read (with errClosed or done)
// and leaves no decoder open.
func TestCompressedCloseInFlight(t *testing.T) {
	const block = 256
	data := stressData(5, block, 3000)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.jsonl.gz"), gzipBytes(t, data))
	for round := range 20 {
		ds, z := openZ(t, filepath.Join(dir, "a.jsonl.gz"), block, 0)
		ds.pool.max = 1
		var wg sync.WaitGroup
		for g := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g+round), 9))
				for range 200 {
					k := uint64(rng.IntN(int(z.n)))
					err := ds.Docs(k, func(b []byte) error { return nil })
					if err != nil {
						if !errors.Is(err, errClosed) {
							t.Error(err)
						}
						return
					}
				}
			}()
		}
		time.Sleep(time.Duration(round) * time.Millisecond)
		ds.Close()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("readers hang after Close")
		}
		ds.pool.mu.Lock()
		if n := len(ds.pool.cursors); n != 0 {
			t.Errorf("round %d: %d cursors open after Close", round, n)
		}
		ds.pool.mu.Unlock()
	}
}
