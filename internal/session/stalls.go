package session

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// DefaultStallLog is how long a consumer must wait for one batch before the
// daemon logs the stall with its cause (Config.StallLog).
const DefaultStallLog = 5 * time.Second

// stallLogEvery bounds a session's stall lines: the first, then at most one
// in this time, telling how many were not logged.
const stallLogEvery = time.Minute

// waitMeter is one session's account of its consumers' waits for batches,
// as the consumers measured them (reported with each release, on the
// stream or in the control block), and of why: each wait is split among the
// causes of the batches it was for (stream.Cost), up to the time those
// took to make; what is left of it is CauseOther. Both are summed over the
// session's consumers and exported divided by their number, so a rate is
// the fraction of time a consumer of the rank waited.
type waitMeter struct {
	consumers float64
	stallLog  time.Duration
	log       *zap.Logger

	mu     sync.Mutex
	waitNs float64
	lateNs [stream.NumCauses]float64
	// logged is when the last stall line was written; quiet counts the
	// stalls not logged since.
	logged time.Time
	quiet  int
}

func newWaitMeter(consumers int, stallLog time.Duration, log *zap.Logger) *waitMeter {
	return &waitMeter{consumers: float64(max(consumers, 1)), stallLog: stallLog, log: log}
}

// waited records a consumer's wait of waitNs for the batches of steps
// first to last, which took cost to make.
func (w *waitMeter) waited(first, last, waitNs uint64, cost stream.Cost) {
	if waitNs == 0 {
		return
	}
	total := float64(cost.Total())
	wait := float64(waitNs)
	explained := min(wait, total)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.waitNs += wait
	if total > 0 {
		for c, d := range cost {
			w.lateNs[c] += explained * float64(d) / total
		}
	}
	w.lateNs[stream.CauseOther] += wait - explained
	if w.stallLog > 0 && time.Duration(waitNs) >= w.stallLog {
		w.logStall(first, last, time.Duration(waitNs), cost)
	}
}

// logStall writes a stall line within the session's budget; w.mu is held.
func (w *waitMeter) logStall(first, last uint64, wait time.Duration, cost stream.Cost) {
	now := time.Now()
	if !w.logged.IsZero() && now.Sub(w.logged) < stallLogEvery {
		w.quiet++
		return
	}
	cause := stream.CauseOther.String()
	if cost.Total() > 0 {
		cause = cost.Main().String()
	}
	fields := []zap.Field{zap.Uint64("step", last), zap.Duration("wait", wait), zap.String("cause", cause),
		zap.Duration("made_in", cost.Total())}
	if first != last {
		fields = append(fields, zap.Uint64("from_step", first))
	}
	for c, d := range cost {
		if d > 0 {
			fields = append(fields, zap.Duration(stream.Cause(c).String(), d))
		}
	}
	if w.quiet > 0 {
		fields = append(fields, zap.Int("stalls_not_logged", w.quiet))
	}
	w.log.Warn("a consumer waited for its batch (stall)", fields...)
	w.logged, w.quiet = now, 0
}

// snapshot is the meter's totals, in seconds per consumer.
func (w *waitMeter) snapshot() (wait float64, late [stream.NumCauses]float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for c, ns := range w.lateNs {
		late[c] = ns / w.consumers / 1e9
	}
	return w.waitNs / w.consumers / 1e9, late
}

// rankWaits exports every open session's waitMeter:
// dataloaderd_rank_wait_seconds_total and dataloaderd_rank_late_seconds_total.
// A session's series go with it.
type rankWaits struct {
	m          *Manager
	wait, late *prometheus.Desc
}

func newRankWaits(m *Manager) *rankWaits {
	labels := []string{"uid", "training_job", "dp_rank"}
	return &rankWaits{
		m: m,
		wait: prometheus.NewDesc("dataloaderd_rank_wait_seconds_total",
			"Time a rank's consumers waited for batches, as they measured it, per consumer.", labels, nil),
		late: prometheus.NewDesc("dataloaderd_rank_late_seconds_total",
			"That wait split by what the batches waited for took their time on (cause), per consumer.",
			append(labels, "cause"), nil),
	}
}

// Describe implements prometheus.Collector.
func (r *rankWaits) Describe(ch chan<- *prometheus.Desc) {
	ch <- r.wait
	ch <- r.late
}

// Collect implements prometheus.Collector.
func (r *rankWaits) Collect(ch chan<- prometheus.Metric) {
	r.m.mu.Lock()
	open := make([]*session, 0, len(r.m.sessions))
	for _, ss := range r.m.sessions {
		open = append(open, ss)
	}
	r.m.mu.Unlock()
	for _, ss := range open {
		if ss.waits == nil {
			continue
		}
		wait, late := ss.waits.snapshot()
		labels := ss.labels()
		ch <- prometheus.MustNewConstMetric(r.wait, prometheus.CounterValue, wait, labels...)
		for c, s := range late {
			ch <- prometheus.MustNewConstMetric(r.late, prometheus.CounterValue, s, append(labels, stream.Cause(c).String())...)
		}
	}
}
