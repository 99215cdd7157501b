package session

import (
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// maxLabel is the longest label value the daemon exports, in bytes. Dataset
// and job names come from clients: unbounded, one long name per session
// would grow every scrape and the daemon's memory for good.
const maxLabel = 64

// labelValue is name as a label value: itself when it is short valid UTF-8,
// else its first bytes and a hash of the whole, so that two long names that
// share a beginning stay two series.
func labelValue(name string) string {
	if len(name) <= maxLabel && utf8.ValidString(name) {
		return name
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	sum := fmt.Sprintf("~%016x", h.Sum64())
	head := strings.ToValidUTF8(name, "?")
	if cut := maxLabel - len(sum); len(head) > cut {
		head = head[:cut]
		for !utf8.ValidString(head) { // a rune cut in two
			head = head[:len(head)-1]
		}
	}
	return head + sum
}

// datasetSeries holds the per-dataset series (tokens, lines, skipped
// records) of the datasets that open sessions read, and deletes a dataset's
// series when the last session reading it closes: a dataset's counters live
// as long as it is served (a later session of the same name starts them
// again from zero, which rate() reads as a counter reset).
type datasetSeries struct {
	vecs []*prometheus.CounterVec
	mu   sync.Mutex
	refs map[string]int
}

func newDatasetSeries(vecs ...*prometheus.CounterVec) *datasetSeries {
	return &datasetSeries{vecs: vecs, refs: map[string]int{}}
}

// acquire counts a session reading the datasets named; it returns their
// label values.
func (d *datasetSeries) acquire(names []string) []string {
	labels := make([]string, len(names))
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, name := range names {
		labels[i] = labelValue(name)
		d.refs[labels[i]]++
	}
	return labels
}

// release undoes acquire; the series of a dataset no session reads any more
// are deleted.
func (d *datasetSeries) release(labels []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, l := range labels {
		if d.refs[l]--; d.refs[l] > 0 {
			continue
		}
		delete(d.refs, l)
		for _, v := range d.vecs {
			v.DeleteLabelValues(l)
		}
	}
}

// counter is vec's series for dataset name, or nil when no open session
// reads it (a count that comes after the last session closed would
// otherwise bring a deleted series back for good).
func (d *datasetSeries) counter(vec *prometheus.CounterVec, name string) prometheus.Counter {
	l := labelValue(name)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.refs[l] == 0 {
		return nil
	}
	return vec.WithLabelValues(l)
}

// jobSeries holds the per-job mixture series (target share, lines served)
// of the jobs whose sessions are open, labelled uid, training_job and
// dataset, and deletes a job's series when its last session closes. The
// sessions of one job (its ranks) share the series: every rank computes the
// same weights at a step, and adds its own lines.
type jobSeries struct {
	share *prometheus.GaugeVec
	lines *prometheus.CounterVec
	mu    sync.Mutex
	refs  map[[2]string]int
}

func newJobSeries(share *prometheus.GaugeVec, lines *prometheus.CounterVec) *jobSeries {
	return &jobSeries{share: share, lines: lines, refs: map[[2]string]int{}}
}

// jobHandles are one session's handles on its job's series, by dataset.
type jobHandles struct {
	key   [2]string
	share []prometheus.Gauge
	lines []prometheus.Counter
}

// acquire counts a session of job (uid, job) reading the datasets labelled
// datasets, and returns its handles.
func (j *jobSeries) acquire(uid, job string, datasets []string) jobHandles {
	h := jobHandles{key: [2]string{uid, labelValue(job)}}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.refs[h.key]++
	for _, d := range datasets {
		h.share = append(h.share, j.share.WithLabelValues(h.key[0], h.key[1], d))
		h.lines = append(h.lines, j.lines.WithLabelValues(h.key[0], h.key[1], d))
	}
	return h
}

// release undoes acquire; a job no session reads any more loses its series.
func (j *jobSeries) release(h jobHandles) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.refs[h.key]--; j.refs[h.key] > 0 {
		return
	}
	delete(j.refs, h.key)
	match := prometheus.Labels{"uid": h.key[0], "training_job": h.key[1]}
	j.share.DeletePartialMatch(match)
	j.lines.DeletePartialMatch(match)
}
