package stream

import (
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/objstore/s3test"
	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// TestObjectsHintsAllocate: the hints a rank gives a Megatron dataset in
// object storage each time a shard moves (its next units' tokens and
// their index entries, asked for ahead) allocate nothing once their
// blocks are in the cache: they build their lists and spans in a scratch
// they reuse (source's megatronhint.go). Made anew for each hint, they
// were most of what the daemon allocated during an epoch, garbage that
// drove its heap to the collector's goal (docs/benchmarks.md, "At
// scale"). Not counted under the race detector.
func TestObjectsHintsAllocate(t *testing.T) {
	srv := s3test.Start(t)
	srv.CreateBucket(t, "hints")
	dir := t.TempDir()
	testcorpus.Megatron(t, dir, "corpus", evenDocs(20_000, 50))
	srv.PutDir(t, "hints", "meg/", dir)
	store := newStore(t, srv, "", objstore.Options{})
	cfg := Config{SeqLen: 63, BatchSize: 4, Seed: 5, LogicalShards: 4, EOS: 0, BOS: -1, Pad: 0, Epochs: 1,
		Datasets: []Dataset{{Name: "meg", Path: "s3://hints/meg/corpus", Format: "megatron", Weight: 1}}}
	c, err := OpenCorpusWith(cfg, objectResources(t, store))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d := c.datasets[0]
	if d.units == nil || d.loader == nil {
		t.Fatalf("the dataset in object storage prefetches units (%v) and entries (%v): want both", d.units != nil, d.loader != nil)
	}
	// A shard's next units, in the order of its permutation.
	sh := d.shards[1]
	units := make([]uint64, maxPrefetchAhead)
	for k := range units {
		units[k] = sh.unit(0, uint64(k))
	}
	d.loader.LoadUnits(units, 1<<20) // their entries and tokens in the cache
	hint := func() {
		d.loader.PrefetchEntries(units)
		d.units.Prefetch(units)
	}
	hint()
	if raceOn {
		t.Skip("the race detector's sync.Pool drops items on purpose: allocations not counted")
	}
	if allocs := testing.AllocsPerRun(200, hint); allocs > 0.5 {
		t.Fatalf("a hint of %d units allocates %.1f times, want none", len(units), allocs)
	}
}
