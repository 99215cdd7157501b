package stream

import (
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// TestAbilitiesFound: the corpus finds, at open, the optional abilities
// each format's source has: a source whose method was renamed or whose
// ability was dropped would be read without it, unnoticed by every other
// test but the slower ones.
func TestAbilitiesFound(t *testing.T) {
	dir := t.TempDir()
	docs, _ := testcorpus.UniqueDocs(rand.New(rand.NewSource(1)), 40, 30, 1)
	writeJSONL(t, filepath.Join(dir, "a.jsonl"), docs, false, true)
	os.Mkdir(filepath.Join(dir, "b"), 0o755)
	writeJSONL(t, filepath.Join(dir, "b", "1.jsonl.gz"), docs[:20], true, false)
	writeJSONL(t, filepath.Join(dir, "b", "2.jsonl.gz"), docs[20:], true, false)
	cfg := Config{SeqLen: 15, BatchSize: 2, Seed: 1, LogicalShards: 2, EOS: 0, BOS: -1, Epochs: 1,
		Datasets: []Dataset{
			{Name: "a", Path: filepath.Join(dir, "a.jsonl"), Format: "jsonl", Weight: 1, Tokenizer: "ints", OnBadRecord: "skip"},
			{Name: "b", Path: filepath.Join(dir, "b"), Format: "jsonl", Weight: 1, Tokenizer: "ints"},
			{Name: "m", Path: testcorpus.Megatron(t, dir, "m", docs), Format: "megatron", Weight: 1},
			{Name: "r", Path: testcorpus.Arrow(t, dir, "r", docs, 7), Format: "arrow", Weight: 1},
		}}
	corpus := openInts(t, cfg, 1, 1<<20)
	type has struct{ prefetcher, units, grouper, offsets, skips, compressed bool }
	want := map[string]has{
		"a": {units: true, grouper: true, skips: true, compressed: true},
		"b": {units: true, grouper: true, skips: true, compressed: true},
		// Mapped token files: index and token hints; no unit prefetch
		// (they are not in object storage).
		"m": {prefetcher: true, offsets: true},
		"r": {prefetcher: true, offsets: true},
	}
	for _, d := range corpus.datasets {
		a := d.abilities
		got := has{a.prefetcher != nil, a.units != nil, a.grouper != nil, a.offsets != nil, a.skips != nil, a.compressed != nil}
		if got != want[d.name] {
			t.Errorf("dataset %q: abilities %+v, want %+v", d.name, got, want[d.name])
		}
	}
}
