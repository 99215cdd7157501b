package session

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// seriesOf lists the label values of metric name's series in reg, by label.
func seriesOf(t *testing.T, reg *prometheus.Registry, name, label string) []string {
	t.Helper()
	var got []string
	for _, f := range mustGather(t, reg) {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					got = append(got, l.GetValue())
				}
			}
		}
	}
	return got
}

// TestSeriesOfClosedSessionsGo: dataset names and job names are label
// values chosen by clients. A dataset's series live while a session reads
// it, and go with the last one; a long name is cut to maxLabel bytes and
// keeps a hash of the whole. Before, 60 sessions with long names took
// /metrics to 120 MiB for good.
func TestSeriesOfClosedSessionsGo(t *testing.T) {
	m := newManager(t, Config{})
	reg := m.cfg.Registry.(*prometheus.Registry)
	cfg := jobConfig(t, t.TempDir(), 0)
	long := strings.Repeat("dataset-é-", 40) // 440 bytes, a two-byte rune at every cut
	cfg.Datasets[0].Name = long
	job := strings.Repeat("j", 300)

	consume := func(o Opened) {
		t.Helper()
		feed, err := m.Attach(0, o.ID, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		b, err := feed.Next(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := feed.Release(b.Slot, b.Step, 0); err != nil {
			t.Fatal(err)
		}
	}
	a := mustOpen(t, m, Request{Job: job, DPRank: 0, DPSize: 2, Config: cfg})
	b := mustOpen(t, m, Request{Job: job, DPRank: 1, DPSize: 2, Config: cfg})
	consume(a)
	consume(b)
	for _, name := range []string{"dataloaderd_tokens_served_total", "dataloaderd_lines_served_total"} {
		got := seriesOf(t, reg, name, "dataset")
		if len(got) != 1 || got[0] != labelValue(long) {
			t.Fatalf("%s: series %q, want the one of the bounded name", name, got)
		}
	}
	for _, v := range append(seriesOf(t, reg, "dataloaderd_ready_slots", "training_job"), labelValue(long)) {
		if len(v) > maxLabel || !utf8.ValidString(v) {
			t.Errorf("label value of %d bytes (valid UTF-8: %v): %q", len(v), utf8.ValidString(v), v)
		}
	}
	// The job's mixture series: one per dataset for the job's two ranks,
	// the target share of the only dataset 1, the lines of both ranks.
	if got := seriesOf(t, reg, "dataloaderd_mixture_target_share", "training_job"); len(got) != 1 || got[0] != labelValue(job) {
		t.Fatalf("dataloaderd_mixture_target_share: series of jobs %q", got)
	}
	for _, f := range mustGather(t, reg) {
		switch f.GetName() {
		case "dataloaderd_mixture_target_share":
			if v := f.GetMetric()[0].GetGauge().GetValue(); v != 1 {
				t.Errorf("target share %v, want 1", v)
			}
		case "dataloaderd_mixture_lines_total":
			if v := f.GetMetric()[0].GetCounter().GetValue(); v < 2 {
				t.Errorf("the job's lines %v, want those of both ranks' batches", v)
			}
		}
	}
	if err := m.Close(0, a.ID, 0); err != nil {
		t.Fatal(err)
	}
	if got := seriesOf(t, reg, "dataloaderd_tokens_served_total", "dataset"); len(got) != 1 {
		t.Fatalf("a session still reads the dataset, its series went: %q", got)
	}
	if got := seriesOf(t, reg, "dataloaderd_mixture_lines_total", "training_job"); len(got) != 1 {
		t.Fatalf("a rank of the job is open, its mixture series went: %q", got)
	}
	if err := m.Close(0, b.ID, 0); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"dataloaderd_tokens_served_total", "dataloaderd_lines_served_total", "dataloaderd_ready_slots",
		"dataloaderd_mixture_target_share", "dataloaderd_mixture_lines_total"} {
		for _, f := range mustGather(t, reg) {
			if f.GetName() == name && len(f.GetMetric()) > 0 {
				t.Errorf("%s: %d series left after every session closed", name, len(f.GetMetric()))
			}
		}
	}
	if m.metrics.datasets.counter(m.metrics.skipped, long) != nil {
		t.Error("a skip counted after the last session closed would bring the series back")
	}
}

// TestLabelValue: short names are kept; long ones are cut on a rune
// boundary, and two that share their beginning stay apart.
func TestLabelValue(t *testing.T) {
	if got := labelValue("web"); got != "web" {
		t.Fatalf("labelValue(web) = %q", got)
	}
	x, y := strings.Repeat("ü", 100)+"x", strings.Repeat("ü", 100)+"y"
	lx, ly := labelValue(x), labelValue(y)
	if lx == ly || len(lx) > maxLabel || !utf8.ValidString(lx) || !strings.HasPrefix(lx, "üü") {
		t.Fatalf("labelValue: %q and %q", lx, ly)
	}
	if got := labelValue("a\xffb"); !utf8.ValidString(got) {
		t.Fatalf("invalid UTF-8 kept: %q", got)
	}
}
