package objstore

import "github.com/prometheus/client_golang/prometheus"

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
}

// NewMetrics makes the series and registers them on reg, when not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dataloaderd_object_requests_total",
			Help: "Requests to object storage, by op (list, head, get) and outcome (ok, error, or retry_throttled, retry_server, retry_transport for an attempt made again).",
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
	}
	m.hit, m.ahead, m.miss = m.lookups.WithLabelValues("hit"), m.lookups.WithLabelValues("ahead"), m.lookups.WithLabelValues("miss")
	if reg != nil {
		reg.MustRegister(m.requests, m.fetched, m.lookups, m.cached, m.evictions)
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
