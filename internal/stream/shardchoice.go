package stream

import (
	"container/heap"
	"math/bits"

	"github.com/dataloaderd/dataloaderd/internal/state"
)

// rankDataset is a dataset's part of a rank: its owned shards, and those
// with lines left in the order they serve them.
type rankDataset struct {
	index  int
	all    []*shardRun
	active shardHeap
}

// shardRun is an owned shard with its cursor and its open window.
type shardRun struct {
	*shard
	st      state.Shard
	win     window
	winOpen bool
	// hinted: the units of the window to open next were prefetched.
	hinted bool
	// ahead is how many units of its windows the shard asks its source
	// to prepare when it opens one (0: the default, 2).
	ahead   uint64
	tie     uint64
	heapIdx int
}

// shardDone reports, without opening a window, whether a shard has served
// its last line: its window cursor is past the last epoch.
func (r *Rank) shardDone(s *shardRun) bool { return r.fr.ended(s.st.Window) }

// nextLine takes the rank's next line into line i of the batch (out) and
// returns its dataset; nil when every dataset of the rank has served its
// last epoch. The mixer picks the dataset; the dataset's shard furthest
// behind its share of the tokens serves the line.
func (r *Rank) nextLine(out *assembly, i int) (*rankDataset, error) {
	for {
		di := r.mix.pick()
		if di < 0 {
			return nil, nil
		}
		d := r.datasets[di]
		s := d.active[0]
		if !s.winOpen {
			r.prefetchNext(d, s)
		}
		j, ok, err := r.lineAt(s)
		if err != nil {
			return nil, err
		}
		if !ok {
			r.retire(d)
			continue
		}
		if err := out.take(&r.fr, i, s, j); err != nil {
			return nil, err
		}
		r.taken(s)
		r.mix.served(di)
		r.touched[s] = struct{}{}
		if r.shardDone(s) {
			r.retire(d)
		} else {
			heap.Fix(&d.active, s.heapIdx)
		}
		return d, nil
	}
}

// retire takes a dataset's first shard out of its active ones: it has no
// line left; the dataset, once it has none active, neither.
func (r *Rank) retire(d *rankDataset) {
	heap.Pop(&d.active)
	if len(d.active) == 0 {
		r.mix.drained(d.index)
	}
}

// prefetchNext is the prefetch policy, applied when shard s of d is about
// to open a window: the shards the heap serves next are about to open
// windows too, so sources that prepare units (text) start on them. A source
// in object storage gets every shard's next units, once per window, so that
// their fetches overlap: its depth shared among the rank's shards.
func (r *Rank) prefetchNext(d *rankDataset, s *shardRun) {
	near, ahead := min(len(d.active), 4), uint64(1)
	s.ahead = 2
	if total := s.ds.ahead; total > 0 {
		near = len(d.active)
		ahead = min(max(4, total/uint64(len(d.active))), maxPrefetchAhead)
		s.ahead = ahead
	}
	for i := 1; i < near; i++ {
		if n := d.active[i]; !n.winOpen && !n.hinted {
			n.prefetchAhead(&r.fr, n.st.Window, ahead)
			n.hinted = s.ds.ahead > 0
		}
	}
}

// lineAt opens the shard's window if it has none open and returns which
// line of it the shard serves next; false when the shard has none left
// (its cursor then moved past the window).
func (r *Rank) lineAt(s *shardRun) (j uint64, ok bool, err error) {
	fr := &r.fr
	if !s.winOpen {
		if err := s.openWindow(fr, s.st.Window, &s.win, max(s.ahead, 2)); err != nil {
			return 0, false, err
		}
		s.winOpen, s.hinted = true, false
	}
	c := s.st.Taken
	if c >= s.win.lines {
		// Only a window at the stream's end runs short or empty.
		s.st.Window, s.st.Taken = r.endOf(s.win), 0
		s.winOpen = false
		return 0, false, nil
	}
	return s.lineOrder(fr, s.st.Window, s.win.lines, c), true, nil
}

// taken moves the shard's cursor past the line lineAt gave, and past its
// window after the window's last line.
func (r *Rank) taken(s *shardRun) {
	s.st.Lines++
	s.st.Taken++
	if s.st.Taken == s.win.lines {
		s.st.Window, s.st.Taken = r.endOf(s.win), 0
		s.winOpen = false
	}
}

// endOf is where the next window starts after w; a window shorter than the
// configured one is the stream's last, and its end is marked ended.
func (r *Rank) endOf(w window) state.Cursor {
	end := w.starts[w.lines]
	if w.lines < r.fr.window && r.fr.epochs > 0 && !r.fr.ended(end) {
		end = state.Cursor{Epoch: r.fr.epochs}
	}
	return end
}

// shardHeap orders a dataset's active shards by (lines+1)/tokens, so each
// shard's share of the lines follows its share of the tokens; ties go by a
// seeded key.
type shardHeap []*shardRun

func (h shardHeap) Len() int { return len(h) }
func (h shardHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	ah, al := bits.Mul64(a.st.Lines+1, b.tokens)
	bh, bl := bits.Mul64(b.st.Lines+1, a.tokens)
	if ah != bh {
		return ah < bh
	}
	if al != bl {
		return al < bl
	}
	return a.tie < b.tie
}
func (h shardHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}
func (h *shardHeap) Push(x any) {
	s := x.(*shardRun)
	s.heapIdx = len(*h)
	*h = append(*h, s)
}
func (h *shardHeap) Pop() any {
	old := *h
	s := old[len(old)-1]
	*h = old[:len(old)-1]
	return s
}
