package stream

import (
	"os"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// TestWorkingSetReadsTheIndexByRange: a Megatron index is read by range, so
// the working set counts a block beside each span of units the windows
// read, not the whole index: well below it for an index of many short
// documents, and never above it.
func TestWorkingSetReadsTheIndexByRange(t *testing.T) {
	dir := t.TempDir()
	docs := make([][]int32, 100_000)
	for i := range docs {
		docs[i] = []int32{int32(1 + i%1000), 7}
	}
	prefix := testcorpus.Megatron(t, dir, "many", docs)
	idx, err := os.Stat(prefix + ".idx")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{SeqLen: 15, BatchSize: 2, Seed: 1, LogicalShards: 4, BOS: -1, ShuffleWindow: 2,
		Datasets: []Dataset{{Name: "many", Path: prefix, Format: "megatron", Weight: 1}}}
	c, err := OpenCorpus(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// 4 KiB blocks: a block per span is below the 2 MB index; 64 KiB
	// blocks: as many would pass it, and the whole index is the bound.
	small := c.WorkingSet([]uint32{0}, 1, 4<<10).Datasets[0]
	if small.IndexBytes <= 0 || small.IndexBytes >= idx.Size() || small.IndexBytes%(4<<10) != 0 {
		t.Errorf("4 KiB blocks: index part %d of an index of %d bytes, want whole blocks below it", small.IndexBytes, idx.Size())
	}
	large := c.WorkingSet([]uint32{0}, 1, 64<<10).Datasets[0]
	if large.IndexBytes != idx.Size() || large.Bytes-large.IndexBytes <= small.Bytes-small.IndexBytes {
		t.Errorf("64 KiB blocks: index part %d, want the whole index's %d", large.IndexBytes, idx.Size())
	}
}

// TestWorkingSetRefetched: a dataset's data bytes and mean document are
// its .bin's, and it is refetched (about a block per document an epoch)
// when read without run_tokens through a cache smaller than it; not with
// runs, nor through a cache that holds it.
func TestWorkingSetRefetched(t *testing.T) {
	dir := t.TempDir()
	docs := make([][]int32, 1000)
	for i := range docs {
		docs[i] = make([]int32, 50)
	}
	prefix := testcorpus.Megatron(t, dir, "docs", docs)
	bin, err := os.Stat(prefix + ".bin")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{SeqLen: 15, BatchSize: 2, Seed: 1, LogicalShards: 4, BOS: -1, ShuffleWindow: 2,
		Datasets: []Dataset{{Name: "docs", Path: prefix, Format: "megatron", Weight: 1}}}
	for _, run := range []uint64{0, 4096} {
		cfg.RunTokens = run
		c, err := OpenCorpus(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ws := c.WorkingSet([]uint32{0}, 1, 4<<10)
		c.Close()
		d := ws.Datasets[0]
		if ws.RunTokens != run || d.DataBytes != bin.Size() || d.UnitBytes != bin.Size()/1000 {
			t.Errorf("run_tokens %d: %+v, want data %d bytes, documents of %d", run, ws, bin.Size(), bin.Size()/1000)
		}
		if got := d.Refetched(ws.RunTokens, bin.Size()/2); got != (run == 0) {
			t.Errorf("run_tokens %d, a cache of half the data: refetched %v", run, got)
		}
		if d.Refetched(ws.RunTokens, 2*(bin.Size()+d.IndexBytes)) {
			t.Errorf("run_tokens %d, a cache of twice the dataset: refetched", run)
		}
	}
}
