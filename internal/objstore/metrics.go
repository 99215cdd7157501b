package objstore

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metrics are the object store's Prometheus series; docs/metrics.md lists
// them. A nil registerer makes them unregistered (tests read Stats).
type Metrics struct {
	requests *prometheus.CounterVec
	fetched  prometheus.Counter
	lookups  *prometheus.CounterVec
	// The lookups' series, found once: they are counted per block read.
	hit, ahead, miss prometheus.Counter
	cached           prometheus.Gauge
	evictions        prometheus.Counter
	journal          prometheus.Gauge
}

// NewMetrics makes the series and registers them on reg, when not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dataloaderd_object_requests_total",
			Help: "Requests to object storage, by op (list, head, get) and outcome (ok, error, or retry_throttled, retry_server, retry_transport, retry_response for an attempt made again).",
		}, []string{"op", "outcome"}),
		fetched: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dataloaderd_object_fetched_bytes_total", Help: "Bytes read from object storage (every attempt's, retries included).",
		}),
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dataloaderd_object_cache_lookups_total",
			Help: "Cache blocks a read needed, by result: hit (cached, read before), ahead (fetched ahead of demand, first read), miss (fetched when read).",
		}, []string{"result"}),
		cached: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dataloaderd_object_cache_bytes", Help: "Bytes of objects held in the node cache (memory or --object-cache-dir).",
		}),
		evictions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dataloaderd_object_cache_evictions_total", Help: "Cache blocks dropped to stay within the cache budget.",
		}),
		journal: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dataloaderd_object_cache_journal_bytes",
			Help: "Bytes of the journals of --object-cache-dir, beside the blocks of dataloaderd_object_cache_bytes (compacted as the daemon runs: about 32 bytes a block and 1 KiB an object at most).",
		}),
	}
	m.hit, m.ahead, m.miss = m.lookups.WithLabelValues("hit"), m.lookups.WithLabelValues("ahead"), m.lookups.WithLabelValues("miss")
	if reg != nil {
		reg.MustRegister(m.requests, m.fetched, m.lookups, m.cached, m.evictions, m.journal)
	}
	return m
}

func (m *Metrics) request(op, outcome string) { m.requests.WithLabelValues(op, outcome).Inc() }

// Touch makes one series of each labeled metric, so that all of them are
// exported (at zero) before the first request.
func (m *Metrics) Touch() {
	for _, op := range []string{"list", "head", "get"} {
		m.requests.WithLabelValues(op, "ok")
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

func gaugeValue(g prometheus.Gauge) float64 {
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		return 0
	}
	return m.GetGauge().GetValue()
}

// Stats are the store's counters, for tests and benchmarks.
type Stats struct {
	Requests, Gets, Heads, Lists, Retries int64
	FetchedBytes                          int64
	Hits, Ahead, Misses                   int64
	Evictions                             int64
	CachedBytes                           int64
	JournalBytes                          int64 // of the disk cache's journals
}

// Stats reads the counters.
func (s *Store) Stats() Stats {
	m := s.opts.Metrics
	st := Stats{FetchedBytes: int64(counterValue(m.fetched)), Evictions: int64(counterValue(m.evictions)),
		Hits: int64(counterValue(m.hit)), Ahead: int64(counterValue(m.ahead)), Misses: int64(counterValue(m.miss)),
		JournalBytes: int64(gaugeValue(m.journal))}
	for _, op := range []string{"get", "head", "list"} {
		for _, outcome := range []string{"ok", "error", "retry_throttled", "retry_server", "retry_transport", "retry_response"} {
			n := int64(counterValue(m.requests.WithLabelValues(op, outcome)))
			st.Requests += n
			switch op {
			case "get":
				st.Gets += n
			case "head":
				st.Heads += n
			case "list":
				st.Lists += n
			}
			if outcome != "ok" && outcome != "error" {
				st.Retries += n
			}
		}
	}
	s.mu.Lock()
	st.CachedBytes = s.used
	s.mu.Unlock()
	return st
}
