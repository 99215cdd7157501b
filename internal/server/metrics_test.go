package server

import (
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// TestMetricsLintedAndDocumented lints every server metric and checks that
// docs/metrics.md lists it.
func TestMetricsLintedAndDocumented(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	res := stream.NewResources(1, 1<<20, nil)
	defer res.Close()
	m.registerResources(reg, res)
	m.skipped.WithLabelValues("x").Inc()
	// Vectors show up only once they have a child.
	m.tokens.WithLabelValues("x").Inc()
	m.lines.WithLabelValues("x").Inc()
	m.readySlots.WithLabelValues("j", "0").Set(1)
	m.errors.WithLabelValues("InvalidArgument").Inc()
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
	fams := mustGather(t, reg)
	if len(fams) != 15 {
		t.Errorf("%d metric families registered; update this test and docs/metrics.md", len(fams))
	}
	for _, f := range fams {
		if !strings.Contains(string(doc), "`"+f.GetName()+"`") {
			t.Errorf("metric %s is not in docs/metrics.md", f.GetName())
		}
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
