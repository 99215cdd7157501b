package stream

import (
	"sort"
	"sync"
	"sync/atomic"
)

// groupOrder orders the units of a shard that holds runs. The shard's
// items are its runs and its units outside runs, in unit order; an epoch
// permutes the items with the shard's permutation (on the number of items
// instead of units) and visits each run's units consecutively, in order.
// A shard without runs has no groupOrder and keeps the plain permutation of
// its units.
//
// Mapping a position to a unit needs the sizes of the items before it in
// the epoch's order: a table of two words per item, built on the first use
// of an epoch (O(items) time, never at open) and kept for the two epochs
// used last, which are the current one and the next.
type groupOrder struct {
	n      uint64      // units
	runs   [][2]uint64 // relative to the shard's first unit
	before []uint64    // before[r]: items before run r, so its item index
	items  uint64

	mu     sync.Mutex // serializes building
	tables atomic.Pointer[[2]*epochOrder]
}

// epochOrder is one epoch's order of a shard's items: the j-th item starts
// at unit start[j] (relative to the shard) and takes positions
// [prefix[j], prefix[j+1]).
type epochOrder struct {
	epoch  uint64
	start  []uint64
	prefix []uint64
}

// newGroupOrder orders a shard of n units whose first is lo; runs are
// absolute, sorted, disjoint, inside the shard, each of two or more units.
func newGroupOrder(lo, n uint64, runs [][2]uint64) *groupOrder {
	g := &groupOrder{n: n, runs: make([][2]uint64, len(runs)), before: make([]uint64, len(runs))}
	var merged uint64 // units of earlier runs beyond their first
	for r, run := range runs {
		a, b := run[0]-lo, run[1]-lo
		g.runs[r] = [2]uint64{a, b}
		g.before[r] = a - merged
		merged += b - a - 1
	}
	g.items = n - merged
	return g
}

// item returns item i's first unit and size, in unit order.
func (g *groupOrder) item(i uint64) (uint64, uint64) {
	r := sort.Search(len(g.before), func(r int) bool { return g.before[r] > i }) - 1
	switch {
	case r < 0:
		return i, 1
	case i == g.before[r]:
		return g.runs[r][0], g.runs[r][1] - g.runs[r][0]
	default:
		return g.runs[r][1] + (i - g.before[r] - 1), 1
	}
}

// table returns epoch's order, building it on first use; k is the epoch's
// permutation key.
func (g *groupOrder) table(k, epoch uint64) *epochOrder {
	if t := g.tables.Load(); t != nil {
		for _, o := range t {
			if o != nil && o.epoch == epoch {
				return o
			}
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var last *epochOrder
	if t := g.tables.Load(); t != nil {
		for _, o := range t {
			if o != nil && o.epoch == epoch {
				return o
			}
		}
		last = t[0]
	}
	o := &epochOrder{epoch: epoch, start: make([]uint64, g.items), prefix: make([]uint64, g.items+1)}
	for j := range g.items {
		a, size := g.item(permute(k, g.items, j))
		o.start[j] = a
		o.prefix[j+1] = o.prefix[j] + size
	}
	g.tables.Store(&[2]*epochOrder{o, last})
	return o
}

// unit returns the unit (relative to the shard) at position pos of the
// epoch whose permutation key is k.
func (g *groupOrder) unit(k, epoch, pos uint64) uint64 {
	o := g.table(k, epoch)
	j := sort.Search(len(o.start), func(j int) bool { return o.prefix[j+1] > pos })
	return o.start[j] + (pos - o.prefix[j])
}
