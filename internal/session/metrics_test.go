package session

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/dataloaderd/dataloaderd/internal/stream"
	"github.com/dataloaderd/dataloaderd/internal/text"
)

// exported is a registry with every metric of a Manager, each vector with
// one child (vectors show up only once they have one).
func exported(t *testing.T) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	res := stream.NewResources(1, 1<<20, nil)
	t.Cleanup(func() { res.Close() })
	m.registerResources(reg, res)
	m.skipped.WithLabelValues("x").Inc()
	m.tokens.WithLabelValues("x").Inc()
	m.lines.WithLabelValues("x").Inc()
	m.readySlots.WithLabelValues("1000", "j", "0").Set(1)
	m.errors.WithLabelValues("InvalidArgument").Inc()
	m.jobShare.WithLabelValues("1000", "j", "x").Set(1)
	m.jobLines.WithLabelValues("1000", "j", "x").Inc()
	ss := &session{key: sessionKey{uid: 1000, job: "j"}, waits: newWaitMeter(1, 0, zap.NewNop())}
	reg.MustRegister(newRankWaits(&Manager{sessions: map[sessionKey]*session{ss.key: ss}}))
	return reg
}

// TestMetricsLintedAndDocumented lints every metric and checks that
// docs/metrics.md lists it.
func TestMetricsLintedAndDocumented(t *testing.T) {
	reg := exported(t)
	problems, err := promlint.NewWithMetricFamilies(mustGather(t, reg)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range mustGather(t, reg) {
		if !strings.Contains(string(doc), "`"+f.GetName()+"`") {
			t.Errorf("metric %s is not in docs/metrics.md", f.GetName())
		}
	}
}

var update = flag.Bool("update", false, "rewrite testdata/metrics.golden from the metrics registered now")

// TestMetricsGolden: the metrics, their types, help and label names are
// those of testdata/metrics.golden: a dashboard or alert built on them
// breaks on any change, so a change must be deliberate (go test
// ./internal/session -run TestMetricsGolden -update, and docs/metrics.md).
func TestMetricsGolden(t *testing.T) {
	var b strings.Builder
	for _, f := range mustGather(t, exported(t)) {
		var labels []string
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		fmt.Fprintf(&b, "%s{%s} %s %q\n", f.GetName(), strings.Join(labels, ","), strings.ToLower(f.GetType().String()), f.GetHelp())
	}
	const golden = "testdata/metrics.golden"
	if *update {
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if b.String() != string(want) {
		t.Errorf("exported metrics differ from %s:\n got:\n%s\nwant:\n%s", golden, b.String(), want)
	}
}

func mustGather(t *testing.T, reg *prometheus.Registry) []*dto.MetricFamily {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// TestDashboardQueriesExportedMetrics: every query of the Grafana dashboard
// names metrics the daemon exports (its own, and the process collector's) and
// groups or filters by labels they carry or that Prometheus adds.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	series, labels := exportedSeries(t)
	dash := readDashboard(t)
	used := checkPanels(t, dash.Panels, series, labels)
	b, err := os.ReadFile("../../deploy/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	legend := regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
	for _, l := range legend.FindAllStringSubmatch(string(b), -1) {
		if !labels[l[1]] {
			t.Errorf("a legend shows label %q, which is on no exported series", l[1])
		}
	}
	// The panels that answer "do the GPUs wait?" must be there.
	for _, n := range []string{"dataloaderd_client_wait_seconds_bucket", "dataloaderd_ready_slots", "dataloaderd_lines_served_total"} {
		if !used[n] {
			t.Errorf("the dashboard does not show %s", n)
		}
	}
}

// exportedSeries are the series names the daemon exports (its own, and the
// process collector's), and the labels on them or that Prometheus adds.
func exportedSeries(t *testing.T) (series, labels map[string]bool) {
	reg := exported(t)
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	series = map[string]bool{}
	labels = map[string]bool{"job": true, "instance": true, "le": true} // added by Prometheus, and histogram buckets
	for _, f := range mustGather(t, reg) {
		series[f.GetName()] = true
		if f.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				series[f.GetName()+s] = true
			}
		}
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = true
			}
		}
	}
	return series, labels
}

type panel struct {
	Title   string
	Targets []struct{ Expr string }
}

func readDashboard(t *testing.T) (dash struct{ Panels []panel }) {
	b, err := os.ReadFile("../../deploy/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("deploy/grafana-dashboard.json: %v", err)
	}
	if len(dash.Panels) == 0 {
		t.Fatal("the dashboard has no panels")
	}
	return dash
}

// checkPanels checks every panel's queries against the exported series and
// labels, and returns the series the panels use.
func checkPanels(t *testing.T, panels []panel, series, labels map[string]bool) map[string]bool {
	name := regexp.MustCompile(`\b(?:dataloaderd|process|go)_[a-z_]+\b`)
	grouping := regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	matcher := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*"`)
	used := map[string]bool{}
	for _, p := range panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			names := name.FindAllString(q.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: query %q names no metric", p.Title, q.Expr)
			}
			for _, n := range names {
				used[n] = true
				if !series[n] {
					t.Errorf("panel %q: %s is not a series the daemon exports", p.Title, n)
				}
			}
			var ls []string
			for _, g := range grouping.FindAllStringSubmatch(q.Expr, -1) {
				ls = append(ls, strings.Split(g[1], ",")...)
			}
			for _, mm := range matcher.FindAllStringSubmatch(q.Expr, -1) {
				ls = append(ls, mm[1])
			}
			for _, l := range ls {
				if l = strings.TrimSpace(l); l != "" && !labels[l] {
					t.Errorf("panel %q: label %q is on no exported series", p.Title, l)
				}
			}
		}
	}
	return used
}

// TestWarnCompressed: the daemon warns of compressed files read whole and of
// a file cut across more than sharedFileShards shards, and of nothing else.
func TestWarnCompressed(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	warnCompressed(zap.New(core), map[string]stream.CompressedStats{
		"fine":    {CompressedStats: text.CompressedStats{Files: 100}, MostShards: sharedFileShards},
		"whole":   {CompressedStats: text.CompressedStats{Files: 3, Whole: 2}, MostShards: 1},
		"shared":  {CompressedStats: text.CompressedStats{Files: 1}, MostShards: 64},
		"level19": {CompressedStats: text.CompressedStats{Files: 4, MaxWindow: 8 << 20}, MostShards: 1},
		"long":    {CompressedStats: text.CompressedStats{Files: 4, MaxWindow: 128 << 20}, MostShards: 1},
		"big":     {CompressedStats: text.CompressedStats{Files: 2, Ambiguous: 1}, MostShards: 1},
	})
	got := map[string]string{}
	for _, e := range logs.All() {
		got[e.ContextMap()["dataset"].(string)] = e.Message
	}
	if len(got) != 4 || !strings.Contains(got["whole"], "read whole") || !strings.Contains(got["shared"], "many logical shards") ||
		!strings.Contains(got["long"], "large decoder window") || !strings.Contains(got["big"], "modulo 4 GiB") {
		t.Fatalf("warnings: %v", got)
	}
}
