package text

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// stressData is JSONL lines meant to meet every edge of the unit cut: blank
// lines, lines padded to start exactly at a block boundary, lines longer
// than a block, CRLF endings, and no final newline.
func stressData(seed uint64, block int, lines int) []byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	var b bytes.Buffer
	for i := 0; i < lines; i++ {
		switch rng.IntN(10) {
		case 0:
			b.WriteString("\n") // blank
			continue
		case 1:
			// pad so the next line starts exactly at a block boundary
			rem := block - b.Len()%block
			if rem > 20 {
				pad := rem - 20
				line, _ := json.Marshal(map[string]any{"text": strings.Repeat("p", pad)})
				// adjust: line len = pad + 11 ; want total rem
				extra := rem - len(line) - 1
				if extra >= 0 {
					line, _ = json.Marshal(map[string]any{"text": strings.Repeat("p", pad+extra)})
				}
				b.Write(line)
				b.WriteString("\n")
				continue
			}
		}
		n := rng.IntN(block / 2)
		if rng.IntN(15) == 0 {
			n = block + rng.IntN(3*block) // longer than B
		}
		line, _ := json.Marshal(map[string]any{"id": i, "text": fmt.Sprintf("%d:%s", i, strings.Repeat("x", n))})
		b.Write(line)
		if rng.IntN(8) == 0 {
			b.WriteString("\r")
		}
		b.WriteString("\n")
	}
	line, _ := json.Marshal(map[string]any{"text": "last-no-newline"})
	b.Write(line)
	return b.Bytes()
}

// refUnits splits data into n units of block bytes the simple way, as the
// reference the decoders must agree with.
func refUnits(t testing.TB, data []byte, block, n uint64) [][]string {
	units := make([][]string, n)
	for pos := uint64(0); pos < uint64(len(data)); {
		end := uint64(len(data))
		next := end
		if i := bytes.IndexByte(data[pos:], '\n'); i >= 0 {
			end, next = pos+uint64(i), pos+uint64(i)+1
		}
		text, reason := parseRecord(data[pos:end], DefaultField)
		if reason != "" {
			t.Fatal(reason)
		}
		if text != nil {
			k := min(pos/block, n-1)
			units[k] = append(units[k], string(text))
		}
		pos = next
	}
	return units
}

// TestCompressedStress: readers in goroutines, in order and at random, over
// gzip and zstd files with right, small and large hints and small decoder
// pools, get for every unit exactly the lines the reference split gives
// (lines at block starts, lines longer than a block, blank lines, CRLF, no
// final newline).
func TestCompressedStress(t *testing.T) {
	const block = 256
	data := stressData(3, block, 1500)
	exact := 0
	for pos := 0; pos < len(data); {
		i := bytes.IndexByte(data[pos:], '\n')
		if i < 0 {
			break
		}
		pos += i + 1
		if pos%block == 0 {
			exact++
		}
	}
	t.Logf("%d bytes, %d lines start at k*B", len(data), exact)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.jsonl.gz"), gzipBytes(t, data))
	writeFile(t, filepath.Join(dir, "a.jsonl.zst"), zstdBytes(t, data))
	size := uint64(len(data))
	for _, file := range []string{"a.jsonl.gz", "a.jsonl.zst"} {
		for _, hint := range []uint64{0, size / 2, size * 2} {
			for _, decoders := range []int{1, 2, 4} {
				t.Run(fmt.Sprintf("%s/h%d/d%d", file, hint, decoders), func(t *testing.T) {
					ds, z := openZ(t, filepath.Join(dir, file), block, hint)
					ds.pool.max = decoders
					want := refUnits(t, data, block, z.n)
					var wg sync.WaitGroup
					errs := make(chan error, 100)
					for g := range 6 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							rng := rand.New(rand.NewPCG(uint64(g), 9))
							k := uint64(rng.IntN(int(z.n)))
							for range 150 {
								switch rng.IntN(4) {
								case 0:
									k = uint64(rng.IntN(int(z.n)))
								default:
									k = (k + 1) % z.n
								}
								var docs []string
								if err := ds.Docs(k, func(b []byte) error { docs = append(docs, string(b)); return nil }); err != nil {
									errs <- err
									return
								}
								if !slices.Equal(docs, want[k]) {
									errs <- fmt.Errorf("unit %d of %d: %d docs, want %d", k, z.n, len(docs), len(want[k]))
									return
								}
							}
						}()
					}
					wg.Wait()
					close(errs)
					for err := range errs {
						t.Error(err)
					}
					ds.pool.mu.Lock()
					for _, c := range ds.pool.cursors {
						if c.busy {
							t.Errorf("busy cursor left")
						}
					}
					ds.pool.mu.Unlock()
					ds.Close()
					ds.pool.mu.Lock()
					if len(ds.pool.cursors) != 0 {
						t.Errorf("%d cursors left open after Close", len(ds.pool.cursors))
					}
					ds.pool.mu.Unlock()
				})
			}
		}
	}
}
