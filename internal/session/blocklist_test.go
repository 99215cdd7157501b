package session

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/dataloaderd/dataloaderd/internal/state"
	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// TestBlocklistReported: a rank resumed after the first epoch with a
// blocklist logs it in effect, warns of each blocked document (all served
// in that epoch) by dataset, document and step, and counts them in
// dataloaderd_blocked_served_documents_total; resumed again from its own
// state with the same blocklist it reports nothing more.
func TestBlocklistReported(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	m := newManager(t, Config{Logger: zap.New(core)})
	cfg := jobConfig(t, t.TempDir(), 2)
	plain, err := stream.OpenCorpus(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	rank, _ := stream.NewRank(plain, 0, 1, nil)
	buf := make([]int32, int(cfg.BatchSize)*cfg.LineTokens())
	for range 150 { // 200 documents of up to 50 tokens, 64 tokens a batch: past the first epoch
		if _, err := rank.NextBatch(buf); err != nil {
			t.Fatal(err)
		}
	}
	st := rank.State()
	blocked := []uint64{3, 50, 199}
	for _, d := range blocked {
		cfg.Blocklist.Documents = append(cfg.Blocklist.Documents, stream.BlockedDocument{Dataset: "web", Document: &d})
	}
	withList, err := stream.OpenCorpus(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer withList.Close()
	from := &state.Restored{Step: st.Step, Shards: st.Shards, FromSize: 1, Mixture: st.Mixture}
	resumed, err := stream.NewRank(withList, 0, 1, from)
	if err != nil {
		t.Fatal(err)
	}
	m.reportBlocklist(m.log, resumed)
	if n := logs.FilterMessage("blocklist in effect").Len(); n != 1 {
		t.Errorf("%d lines say the blocklist is in effect", n)
	}
	warned := logs.FilterMessage("blocked document was served before the blocklist arrived").All()
	if len(warned) != len(blocked) || blockedServed(t, m) != float64(len(blocked)) {
		t.Fatalf("%d warnings, %v counted, want %d", len(warned), blockedServed(t, m), len(blocked))
	}
	for i, e := range warned {
		f := e.ContextMap()
		if f["dataset"] != "web" || f["document"] != blocked[i] || f["at_or_before_step"] != st.Step {
			t.Errorf("warning %v", f)
		}
	}
	st2 := resumed.State()
	again, err := stream.NewRank(withList, 0, 1, &state.Restored{Step: st2.Step, Shards: st2.Shards, FromSize: 1,
		Mixture: st2.Mixture, Blocklists: st2.Blocklists})
	if err != nil {
		t.Fatal(err)
	}
	m.reportBlocklist(m.log, again)
	if n := logs.FilterMessage("blocked document was served before the blocklist arrived").Len(); n != len(blocked) {
		t.Errorf("resumed with the same blocklist: %d warnings in all, want %d", n, len(blocked))
	}
	if n := logs.FilterMessage("blocklist in effect").Len(); n != 1 {
		t.Errorf("resumed with the same blocklist: %d lines say it is in effect, want the first open's only", n)
	}
	// A state whose log holds a range of steps skipped before the step:
	// the cursors passed its lines as serving them would, so a warning
	// says the document was served or skipped, naming the range.
	skipped, err := stream.NewRank(withList, 0, 1, &state.Restored{Step: st.Step, Shards: st.Shards, FromSize: 1,
		Mixture: st.Mixture, Skips: []state.SkipRange{{First: 10, Last: 20}}})
	if err != nil {
		t.Fatal(err)
	}
	m.reportBlocklist(m.log, skipped)
	want := "blocked document was served, or passed in a skipped range (10-20 (11 steps, skipped)), before the blocklist arrived"
	if n := logs.FilterMessage(want).Len(); n != len(blocked) {
		t.Errorf("after a skipped range: %d warnings %q, want %d", n, want, len(blocked))
	}
}

// blockedServed is dataloaderd_blocked_served_documents_total.
func blockedServed(t *testing.T, m *Manager) float64 {
	t.Helper()
	var out dto.Metric
	if err := m.metrics.blockedServed.Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetCounter().GetValue()
}
