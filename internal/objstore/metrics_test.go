package objstore_test

import (
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
)

// TestMetricsDocumented: the object store's metrics pass promlint and
// docs/metrics.md lists each one.
func TestMetricsDocumented(t *testing.T) {
	reg := prometheus.NewRegistry()
	objstore.NewMetrics(reg).Touch()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(families) != 6 {
		t.Fatalf("%d metric families, want 6", len(families))
	}
	problems, err := promlint.NewWithMetricFamilies(families).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if !strings.Contains(string(doc), "`"+f.GetName()+"`") {
			t.Errorf("metric %s is not in docs/metrics.md", f.GetName())
		}
	}
}
