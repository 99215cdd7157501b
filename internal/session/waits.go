package session

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dataloaderd/dataloaderd/internal/mapped"
	"github.com/dataloaderd/dataloaderd/internal/ring"
)

// waitHistogram is dataloaderd_client_wait_seconds. Clients on the stream
// report each wait with their release; clients on the shared-memory control
// block keep their own cumulative bucket counts in it, which are read at
// scrape time and kept when their session closes. Both end in one histogram
// with the buckets of ring.WaitBucketNs.
type waitHistogram struct {
	desc *prometheus.Desc

	mu      sync.Mutex
	buckets [ring.WaitBuckets]uint64 // cumulative
	count   uint64
	sumNs   float64
	live    map[*ring.Control]struct{}
}

func newWaitHistogram() *waitHistogram {
	return &waitHistogram{
		desc: prometheus.NewDesc("dataloaderd_client_wait_seconds",
			"Time a client waited for its next batch, as the client measured it.", nil, nil),
		live: map[*ring.Control]struct{}{},
	}
}

// observe adds one wait reported on a stream.
func (w *waitHistogram) observe(ns uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.buckets {
		if float64(ns) <= ring.WaitBucketNs[i] {
			w.buckets[i]++
		}
	}
	w.count++
	w.sumNs += float64(ns)
}

// track starts reading a control block's wait counts.
func (w *waitHistogram) track(c *ring.Control) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.live[c] = struct{}{}
}

// retire keeps a control block's final counts and stops reading it; call it
// before the ring is unmapped.
func (w *waitHistogram) retire(c *ring.Control) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.live[c]; !ok {
		return
	}
	delete(w.live, c)
	addControl(c, &w.buckets, &w.count, &w.sumNs)
}

// addControl adds a control block's wait counts; a block whose file was cut
// short under its mapping (its client truncated it) adds nothing.
func addControl(c *ring.Control, buckets *[ring.WaitBuckets]uint64, count *uint64, sumNs *float64) {
	var b [ring.WaitBuckets]uint64
	var n uint64
	var s float64
	if mapped.Guard(func() error { addCounts(c, &b, &n, &s); return nil }) != nil {
		return
	}
	for i := range buckets {
		buckets[i] += b[i]
	}
	*count += n
	*sumNs += s
}

func addCounts(c *ring.Control, buckets *[ring.WaitBuckets]uint64, count *uint64, sumNs *float64) {
	for i := 0; i < c.Consumers(); i++ {
		b, n, s := c.WaitStats(i)
		var cum uint64
		for j := range buckets {
			cum += b[j]
			buckets[j] += cum
		}
		*count += n
		*sumNs += float64(s)
	}
}

// Describe implements prometheus.Collector.
func (w *waitHistogram) Describe(ch chan<- *prometheus.Desc) { ch <- w.desc }

// Collect implements prometheus.Collector.
func (w *waitHistogram) Collect(ch chan<- prometheus.Metric) {
	w.mu.Lock()
	buckets, count, sum := w.buckets, w.count, w.sumNs
	for c := range w.live {
		addControl(c, &buckets, &count, &sum)
	}
	w.mu.Unlock()
	upper := make(map[float64]uint64, len(buckets))
	for i, n := range buckets {
		upper[ring.WaitBucketNs[i]/1e9] = n
	}
	ch <- prometheus.MustNewConstHistogram(w.desc, count, sum/1e9, upper)
}
