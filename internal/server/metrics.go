package server

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the server's Prometheus metrics, registered on the registry
// main builds; docs/metrics.md lists each one.
type metrics struct {
	sessions   prometheus.Gauge
	batches    prometheus.Counter
	tokens     *prometheus.CounterVec
	lines      *prometheus.CounterVec
	clientWait *waitHistogram
	readySlots *prometheus.GaugeVec
	stateSave  prometheus.Histogram
	stateBytes prometheus.Histogram
	errors     *prometheus.CounterVec
	ringBytes  prometheus.Gauge
	devBytes   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dataloaderd_sessions", Help: "Open sessions (one per job and data-parallel rank).",
		}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dataloaderd_batches_served_total", Help: "Batches written into session rings (prefetched ones included).",
		}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dataloaderd_tokens_served_total", Help: "Tokens served, padding included, by dataset.",
		}, []string{"dataset"}),
		lines: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dataloaderd_lines_served_total", Help: "Lines (seq_len+1 tokens) served, by dataset.",
		}, []string{"dataset"}),
		clientWait: newWaitHistogram(),
		readySlots: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "dataloaderd_ready_slots", Help: "Batches produced and not yet handed to the session's first consumer.",
		}, []string{"job", "dp_rank"}),
		stateSave: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "dataloaderd_state_save_seconds", Help: "Time to write a rank's state file.",
			Buckets: prometheus.ExponentialBuckets(1e-4, 4, 10),
		}),
		stateBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "dataloaderd_state_size_bytes", Help: "Size of a saved rank state.",
			Buckets: prometheus.ExponentialBuckets(256, 4, 10),
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dataloaderd_errors_total", Help: "Errors returned to clients, by gRPC code.",
		}, []string{"kind"}),
		ringBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dataloaderd_ring_bytes", Help: "Bytes of ring memory held by open sessions.",
		}),
	}
	m.devBytes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "dataloaderd_device_ring_bytes", Help: "Bytes of GPU memory held by the device rings of open cuda sessions.",
	})
	reg.MustRegister(m.sessions, m.batches, m.tokens, m.lines, m.clientWait, m.readySlots,
		m.stateSave, m.stateBytes, m.errors, m.ringBytes, m.devBytes)
	return m
}
