package session

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// TestObjectWorkingSet: a session of an s3:// dataset adds its working set
// (stream.Corpus.WorkingSet) to dataloaderd_object_working_set_bytes at
// open and takes it back at close. With a cache below it the open goes on
// (a warning), or is refused with ErrOverBudget naming --object-cache-mb
// under RequireWorkingSet; a cache above it admits it either way.
func TestObjectWorkingSet(t *testing.T) {
	srv := objectCorpus(t)
	useStore(t, srv, srv.Endpoint)
	cfg := stream.Config{SeqLen: 15, BatchSize: 4, Seed: 9, LogicalShards: 8, BOS: -1,
		Datasets: []stream.Dataset{{Name: "web", Path: "s3://bucket/corpus/web", Format: "megatron", Weight: 1}}}
	// Each of rank 0's 4 shards holds its few KiB and a 64 KiB block at each
	// end: over 512 KiB, past a cache of 256 KiB, within one of 16 MiB.
	for _, tc := range []struct {
		cache   int64
		require bool
		refused bool
	}{{256 << 10, false, false}, {256 << 10, true, true}, {16 << 20, true, false}} {
		store, err := objstore.New(objstore.Options{MemoryBytes: tc.cache})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		m := newManager(t, Config{Objects: store, RequireWorkingSet: tc.require})
		o, err := m.Open(context.Background(), Request{Job: "j", DPRank: 0, DPSize: 2, Config: cfg})
		gauge := gaugeValue(t, m.metrics.workingSet)
		if tc.refused {
			if !errors.Is(err, ErrOverBudget) || !strings.Contains(err.Error(), "--object-cache-mb") || gauge != 0 {
				t.Errorf("%+v: open %v, gauge %v; want ErrOverBudget naming --object-cache-mb, and 0", tc, err, gauge)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		if gauge <= 512<<10 {
			t.Errorf("%+v: working set %v bytes, want over 512 KiB", tc, gauge)
		}
		if err := m.Close(0, o.ID, 0); err != nil {
			t.Fatal(err)
		}
		if gauge := gaugeValue(t, m.metrics.workingSet); gauge != 0 {
			t.Errorf("%+v: working set %v after the session closed, want 0", tc, gauge)
		}
	}
}

// gaugeValue reads a gauge.
func gaugeValue(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// TestWarnRefetched: a dataset in object storage larger than the cache and
// read without run_tokens is warned of by name, with the flag to set; one
// read in runs, one that fits, and a local one are not.
func TestWarnRefetched(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	big := stream.DatasetWorkingSet{Name: "web", InObjects: true, DataBytes: 8 << 20, UnitBytes: 2000}
	small := stream.DatasetWorkingSet{Name: "code", InObjects: true, DataBytes: 512 << 10}
	local := stream.DatasetWorkingSet{Name: "books", DataBytes: 64 << 20}
	ws := stream.WorkingSet{Datasets: []stream.DatasetWorkingSet{big, small, local}}
	warnRefetched(ws, 1<<20, 64<<10, zap.New(core))
	ws.RunTokens = 4096
	warnRefetched(ws, 1<<20, 64<<10, zap.New(core))
	got := logs.All()
	if len(got) != 1 || got[0].Level != zap.WarnLevel || !strings.Contains(got[0].Message, "run_tokens") ||
		got[0].ContextMap()["dataset"] != "web" || got[0].ContextMap()["mean_document_bytes"] != int64(2000) {
		t.Fatalf("logged %+v, want one warning of dataset web naming run_tokens", got)
	}
}
