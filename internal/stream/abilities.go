package stream

import (
	"github.com/dataloaderd/dataloaderd/internal/source"
	"github.com/dataloaderd/dataloaderd/internal/text"
)

// The optional abilities of a source.Source: what some sources do beyond
// the interface, declared here, in one place, and found once per dataset
// when the corpus opens it (abilitiesOf). Beside them, source.Prefetcher:
// hints for sources in mapped files; and, asked only by dataloaderd
// explain, unitLocator and recordPlacer (explain.go).

// unitPrefetcher is a source that can prepare units ahead of their reads
// (text datasets tokenize them on a worker pool; datasets in object
// storage fetch their bytes into the node's cache). It never blocks.
type unitPrefetcher interface {
	Prefetch(units []uint64) int
}

// prefetchDepther is a unitPrefetcher that says how many units ahead of a
// rank it wants (0: none).
type prefetchDepther interface {
	PrefetchDepth() uint64
}

// unitGrouper is a source some of whose units form runs best read one after
// the other, in order: the units of a compressed JSONL file, which is
// decompressed from its start to reach one, so that reading them in a
// random order would decompress the file again for each. Groups returns
// the runs of two or more units in [lo, hi), clipped to it, in order.
type unitGrouper interface {
	Groups(lo, hi uint64) [][2]uint64
}

// offsetChecker is a source whose Offset may have failed to read (a file
// in object storage): shards cut by Offset are valid only while
// OffsetError is nil.
type offsetChecker interface {
	OffsetError() error
}

// offsetPrefetcher is a source whose Offset may wait on object storage:
// told the units near which the shards will be cut, it fetches what
// their offsets need ahead, together. It never blocks.
type offsetPrefetcher interface {
	PrefetchOffsets(units []uint64)
}

// unitLoader is a source whose units' index entries are read from object
// storage (IndexRemote): a window about to be walked has its units'
// entries, then their tokens, brought into the node's cache at once, in a
// few ranged GETs (LoadUnits, which returns once they are in), rather than
// a round trip for each block its walk meets; units fetched ahead have
// their entries asked for together (PrefetchEntries, which never blocks).
// Both are hints: they change nothing but timing.
type unitLoader interface {
	IndexRemote() bool
	LoadUnits(units []uint64, window uint64)
	PrefetchEntries(units []uint64)
}

// skipCounter is a source that skips bad records (text datasets with
// on_bad_record skip): how many so far.
type skipCounter interface {
	Skipped() uint64
}

// compressedDescriber is a source of compressed JSONL files: what they are.
type compressedDescriber interface {
	Compressed() text.CompressedStats
}

// abilities are a source's optional abilities, each nil when it has none.
type abilities struct {
	prefetcher source.Prefetcher
	units      unitPrefetcher
	// ahead is how many units a rank asks units to prepare, shared among
	// its shards (0: a few per shard); sources in object storage want
	// many, through a request's latency.
	ahead        uint64
	grouper      unitGrouper
	offsets      offsetChecker
	offsetsAhead offsetPrefetcher
	loader       unitLoader
	skips        skipCounter
	compressed   compressedDescriber
}

// abilitiesOf finds what src can do beyond source.Source.
func abilitiesOf(src source.Source) abilities {
	var a abilities
	a.prefetcher, _ = src.(source.Prefetcher)
	a.units, _ = src.(unitPrefetcher)
	if dp, ok := src.(prefetchDepther); ok {
		// Token sources prepare units only when in object storage.
		if a.ahead = dp.PrefetchDepth(); a.ahead == 0 {
			a.units = nil
		}
	}
	a.grouper, _ = src.(unitGrouper)
	a.offsets, _ = src.(offsetChecker)
	a.offsetsAhead, _ = src.(offsetPrefetcher)
	if l, ok := src.(unitLoader); ok && l.IndexRemote() {
		a.loader = l
	}
	a.skips, _ = src.(skipCounter)
	a.compressed, _ = src.(compressedDescriber)
	return a
}
