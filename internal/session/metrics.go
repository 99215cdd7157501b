package session

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// metrics are the daemon's Prometheus metrics, registered on the registry
// main builds; docs/metrics.md lists each one.
type metrics struct {
	sessions   prometheus.Gauge
	batches    prometheus.Counter
	tokens     *prometheus.CounterVec
	lines      *prometheus.CounterVec
	clientWait *waitHistogram
	errors     *prometheus.CounterVec
	readySlots *prometheus.GaugeVec
	stateSave  prometheus.Histogram
	stateBytes prometheus.Histogram
	ringBytes  prometheus.Gauge
	ringBudget prometheus.Gauge
	devBytes   prometheus.Gauge
	// workingSet is the object cache the open sessions need (workingset.go).
	workingSet prometheus.Gauge
	devCopy    prometheus.Histogram
	skipped    *prometheus.CounterVec
	// skippedBatches and skippedTokens count the batches of skipped ranges
	// of steps (skip_steps) made and dropped, and their lines' tokens.
	skippedBatches prometheus.Counter
	skippedTokens  prometheus.Counter
	// datasets deletes the dataset series of closed sessions.
	datasets *datasetSeries
	// jobs holds the mixture series by job: target share and lines served.
	jobShare *prometheus.GaugeVec
	jobLines *prometheus.CounterVec
	jobs     *jobSeries
	// reconnects counts sessions reopened on this daemon after the one
	// before it went away; reconnectWait is how long their clients waited.
	reconnects    prometheus.Counter
	reconnectWait prometheus.Histogram
	// lostConsumers counts consumers whose process died without closing,
	// by what became of the session kept for them (keep.go).
	lostConsumers *prometheus.CounterVec
	// blockedServed counts blocked documents found served when their
	// blocklist arrived at a resume (blocklist.go).
	blockedServed prometheus.Counter
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
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dataloaderd_errors_total", Help: "Failures returned to clients, by gRPC code; the normal end of a stream is none.",
		}, []string{"kind"}),
		readySlots: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "dataloaderd_ready_slots", Help: "Batches produced and not yet handed to the session's first consumer.",
		}, []string{"uid", "training_job", "dp_rank"}),
		stateSave: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "dataloaderd_state_save_seconds", Help: "Time to write a rank's state file.",
			Buckets: prometheus.ExponentialBuckets(1e-4, 4, 10),
		}),
		stateBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "dataloaderd_state_size_bytes", Help: "Size of a saved rank state.",
			Buckets: prometheus.ExponentialBuckets(256, 4, 10),
		}),
		ringBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dataloaderd_ring_bytes", Help: "Bytes of ring memory held by open sessions.",
		}),
		ringBudget: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dataloaderd_ring_budget_bytes", Help: "The ring memory budget (--ring-budget-mb); 0: none.",
		}),
	}
	m.workingSet = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "dataloaderd_object_working_set_bytes",
		Help: "Bytes of the node's object cache the open sessions' s3:// datasets need at once: the indices, and each owned shard's open shuffle window and the next one (or the units fetched ahead, when more).",
	})
	m.devBytes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "dataloaderd_device_ring_bytes", Help: "Bytes of GPU memory held by the device rings of open cuda sessions.",
	})
	m.devCopy = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "dataloaderd_device_copy_seconds",
		Help: "Time a cuda session's producer took to copy one batch to its device slot and see the copy complete.",
		// 10 us to 164 ms, by factors of 4: from a small slot on a fast link to a busy or throttled one.
		Buckets: prometheus.ExponentialBuckets(1e-5, 4, 8),
	})
	m.skipped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "dataloaderd_text_records_skipped_total", Help: "Bad records of text datasets skipped (on_bad_record: skip), by dataset.",
	}, []string{"dataset"})
	m.datasets = newDatasetSeries(m.tokens, m.lines, m.skipped)
	m.registerRepairs(reg)
	m.jobShare = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "dataloaderd_mixture_target_share",
		Help: "The share of lines a job's mixing weights (or schedule) give each dataset at the last batch produced.",
	}, []string{"uid", "training_job", "dataset"})
	m.jobLines = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "dataloaderd_mixture_lines_total",
		Help: "Lines served to a job, by dataset (its realized mixture; prefetched batches included).",
	}, []string{"uid", "training_job", "dataset"})
	m.jobs = newJobSeries(m.jobShare, m.jobLines)
	m.reconnects = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "dataloaderd_reconnects_total",
		Help: "Sessions reopened by their clients after the daemon before this one went away.",
	})
	m.reconnectWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "dataloaderd_reconnect_wait_seconds",
		Help: "How long a reconnecting client was without a daemon, from losing it to reopening its session.",
		// 10 ms to about 160 s, by factors of 4.
		Buckets: prometheus.ExponentialBuckets(0.01, 4, 8),
	})
	m.lostConsumers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "dataloaderd_lost_consumers_total",
		Help: "Consumers whose process died without closing their session, by outcome: continued (a new process took its place), expired (none came within --keep-detached: the session was reclaimed), fresh (a new process started the rank over).",
	}, []string{"outcome"})
	for _, o := range []string{outcomeContinued, outcomeExpired, outcomeFresh} {
		m.lostConsumers.WithLabelValues(o)
	}
	reg.MustRegister(m.lostConsumers)
	reg.MustRegister(m.sessions, m.batches, m.tokens, m.lines, m.clientWait, m.readySlots,
		m.stateSave, m.stateBytes, m.errors, m.ringBytes, m.ringBudget, m.workingSet, m.devBytes, m.devCopy, m.skipped, m.jobShare, m.jobLines, m.reconnects, m.reconnectWait)
	return m
}

// registerResources exports the tokenized-unit cache of the text datasets.
func (m *metrics) registerResources(reg prometheus.Registerer, res *stream.Resources) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "dataloaderd_token_cache_bytes", Help: "Bytes of tokenized text units held in the cache.",
		}, func() float64 { return float64(res.CacheStats().Bytes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "dataloaderd_token_cache_hits_total", Help: "Reads of tokenized text units found in the cache.",
		}, func() float64 { return float64(res.CacheStats().Hits) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "dataloaderd_token_cache_misses_total", Help: "Reads of text units that had to be tokenized (again).",
		}, func() float64 { return float64(res.CacheStats().Misses) }),
	)
}

// registerRepairs registers the counts of what a run's repairs did: the
// batches of skipped ranges of steps (skip_steps), and the blocked
// documents a blocklist found served already.
func (m *metrics) registerRepairs(reg prometheus.Registerer) {
	m.skippedBatches = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "dataloaderd_skipped_batches_total",
		Help: "Batches of skipped ranges of steps (skip_steps) made and dropped, never served (a range made again after a change counts again).",
	})
	m.skippedTokens = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "dataloaderd_skipped_tokens_total",
		Help: "Tokens of the lines of skipped batches (skip_steps): passed by the cursors, counted as skipped, not served.",
	})
	m.blockedServed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "dataloaderd_blocked_served_documents_total",
		Help: "Documents a blocklist names that were already served (whole or in part, or passed in a range of steps skipped before) when the blocklist arrived at a resume, counted by the rank owning each.",
	})
	reg.MustRegister(m.skippedBatches, m.skippedTokens, m.blockedServed)
}

// countSkipped counts the batches of a skipped range made and dropped
// before batch b, and their tokens (lines of lineTokens tokens).
func (m *metrics) countSkipped(b stream.Batch, lineTokens int) {
	if b.Skipped == 0 {
		return
	}
	m.skippedBatches.Add(float64(b.Skipped))
	var n int
	for _, l := range b.SkippedLines {
		n += l
	}
	m.skippedTokens.Add(float64(n * lineTokens))
}
