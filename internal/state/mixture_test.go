package state

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// logAt is a log in effect since step 0 with the given changes queued.
func logAt(queued ...uint64) []MixChange {
	m := []MixChange{{Step: 0, Weights: []float64{1}}}
	for _, s := range queued {
		m = append(m, MixChange{Step: s, Weights: []float64{float64(s)}, Runtime: true})
	}
	return m
}

// TestQueuedChangesSaved: changes queued after a state's step are kept by
// its file (version 3) and by its sharded form, and come back from a merge
// and a sharded restore; ranks whose queues differ merge as differing.
func TestQueuedChangesSaved(t *testing.T) {
	fp := testPrint()
	states := world(2)
	for i := range states {
		states[i].Mixture = logAt(20, 30)
	}
	var names []string
	var blobs [][]byte
	for _, st := range states {
		b, err := Encode(fp, st)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"version":3`) {
			t.Fatalf("state file %s is not version 3", b)
		}
		names, blobs = append(names, FileName(st.DPRank, st.DPSize)), append(blobs, b)
	}
	r, err := Merge(fp, names, blobs)
	if err != nil || !reflect.DeepEqual(r.Mixture, logAt(20, 30)) || r.MixturesDiffer {
		t.Fatalf("merge: %v, mixture %+v, differ %v", err, r.Mixture, r.MixturesDiffer)
	}
	if q := Queued(r.Mixture, r.Step); len(q) != 2 || q[0].Step != 20 {
		t.Fatalf("queued after step %d: %+v", r.Step, q)
	}
	sh, err := Split(fp, states[1])
	if err != nil {
		t.Fatal(err)
	}
	back, err := sh.Restore(fp, 1, 2)
	if err != nil || !reflect.DeepEqual(back.Mixture, logAt(20, 30)) {
		t.Fatalf("sharded restore: %v, mixture %+v", err, back.Mixture)
	}
	// Rank 1 queued another change (or none): the ranks disagree.
	for _, other := range [][]MixChange{logAt(20), logAt(20, 31), logAt()} {
		st := states[1]
		st.Mixture = other
		b, err := Encode(fp, st)
		if err != nil {
			t.Fatal(err)
		}
		r, err := Merge(fp, names, [][]byte{blobs[0], b})
		if err != nil || !r.MixturesDiffer {
			t.Fatalf("rank 1 queueing %+v: %v, differ %v", other, err, r.MixturesDiffer)
		}
	}
}

// TestOlderStatesRead: a version 2 file (no queue) is still read; one
// whose log has an entry past its step is refused, as version 2 daemons
// refused it.
func TestOlderStatesRead(t *testing.T) {
	v2 := `{"version":2,"dp_rank":0,"dp_size":1,"step":7,"fingerprint":{"seq_len":8,"logical_shards":4,"seed":3,"eos_id":0,"bos_id":-1,"shuffle_window":8,"datasets":[{"name":"a","format":"megatron","files":2,"bytes":100,"units":10,"digest":"x"}]},
	"shards":[{"dataset":0,"first":0,"lines":[1,2,3,4],"epoch":[1,1,1,1],"pos":[0,1,2,3],"offset":[3,3,3,3],"taken":[2,2,2,2],"base":[0,0,0,0]}],
	"mixture":[{"step":0,"weights":[1]},{"step":5,"weights":[2],"runtime":true}]}`
	_, r, err := Decode("v2", []byte(v2))
	if err != nil || len(r.Mixture) != 2 || len(Queued(r.Mixture, r.Step)) != 0 {
		t.Fatalf("v2 decoded: %v, %+v", err, r.Mixture)
	}
	past := strings.Replace(v2, `"step":5`, `"step":9`, 1)
	if _, _, err := Decode("v2", []byte(past)); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "only version 3 queues changes") {
		t.Fatalf("a v2 log with an entry past its step: %v", err)
	}
}

// TestTrimMixture: trimming bounds the history to MaxMixLog entries and
// drops the oldest, never the entry in effect, the last configured one, or
// a queued one.
func TestTrimMixture(t *testing.T) {
	var m []MixChange
	for s := uint64(0); s < 200; s++ {
		m = append(m, MixChange{Step: s, Weights: []float64{1}, Runtime: s > 0 && s != 50})
	}
	got := TrimMixture(m, 120)
	hist, queued := got[:queuedFrom(got, 120)], Queued(got, 120)
	if len(hist) != MaxMixLog || hist[0].Step != 50 || hist[1].Step != 120-MaxMixLog+2 || hist[len(hist)-1].Step != 120 {
		t.Fatalf("history kept: %d entries, steps %d, %d ... %d", len(hist), hist[0].Step, hist[1].Step, hist[len(hist)-1].Step)
	}
	if len(queued) != 79 || queued[0].Step != 121 {
		t.Fatalf("queued kept: %d from step %d", len(queued), queued[0].Step)
	}
	if short := m[:10]; len(TrimMixture(short, 120)) != 10 {
		t.Fatal("a short log was trimmed")
	}
}

// TestMixtureLogChecked: a log from a state is refused, naming the entry,
// when its queue is longer than MaxQueued, holds a change not made at run
// time or two for one step, when its entries are out of step order, or
// when a weight vector sums past MaxWeightSum (1e308 and 1e308: +Inf).
func TestMixtureLogChecked(t *testing.T) {
	many := logAt()
	for s := uint64(1); s <= MaxQueued+1; s++ {
		many = append(many, MixChange{Step: s, Weights: []float64{1}, Runtime: true})
	}
	if _, _, err := SplitMixture("x: ", many, 0); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "more than 256") {
		t.Fatalf("a queue of %d: %v", MaxQueued+1, err)
	}
	configured := append(logAt(4), MixChange{Step: 6, Weights: []float64{1}})
	if _, _, err := SplitMixture("x: ", configured, 3); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "entry at step 6 is after step 3") {
		t.Fatalf("a configured entry queued: %v", err)
	}
	twice := logAt(4, 4)
	if _, _, err := SplitMixture("x: ", twice, 3); !errors.Is(err, ErrMismatch) {
		t.Fatalf("two changes queued for one step: %v", err)
	}
	h, q, err := SplitMixture("x: ", logAt(2, 4, 6), 3)
	if err != nil || len(h) != 2 || len(q) != 2 {
		t.Fatalf("split at 3: %v, history %+v, queued %+v", err, h, q)
	}
	if err := CheckMixture("x: ", logAt(6, 4), []string{"a"}); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "before the entry before it") {
		t.Fatalf("a log out of step order: %v", err)
	}
	inf := []MixChange{{Weights: []float64{1e308, 1e308}}}
	if err := CheckMixture("x: ", inf, []string{"a", "b"}); !errors.Is(err, ErrMismatch) ||
		!strings.Contains(err.Error(), `x: mixture[0] (step 0) weights [1e+308 1e+308]: weights "a" 1e+308, "b" 1e+308: the weights sum to +Inf, more than 1e+100`) {
		t.Fatalf("weights summing to +Inf: %v", err)
	}
}

// TestAllZeroWeightsRefused: a restored log whose queued change, history
// entry or schedule point has every weight zero is refused at restore, by
// Decode (a rank file) and by Restore (the run part of a sharded state),
// naming the file, the entry and the values. Before, CheckMixture took
// them: at the queued change's step every weight became zero and the rank
// reported the end of its data (tokens silently lost), and a schedule point
// of zeros gave NaN shares.
func TestAllZeroWeightsRefused(t *testing.T) {
	fp := testPrint()
	for _, c := range []struct {
		name    string
		mixture []MixChange
		want    string
	}{
		{"queued change", []MixChange{{Weights: []float64{1}}, {Step: 5, Weights: []float64{0}, Runtime: true}},
			"mixture[1] (step 5) weights [0]: every weight is zero"},
		{"history entry", []MixChange{{Weights: []float64{0}}},
			"mixture[0] (step 0) weights [0]: every weight is zero"},
		{"schedule point", []MixChange{{Weights: []float64{1},
			Schedule: []SchedulePoint{{Weights: []float64{1}}, {Step: 4, Weights: []float64{0}}}}},
			"mixture[0] schedule point 1 (step 4) weights [0]: every weight is zero"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := world(1)[0]
			st.Step, st.Mixture = 3, c.mixture
			b, err := Encode(fp, st)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := Decode("rank-0-of-1.json", b); !errors.Is(err, ErrMismatch) ||
				!strings.Contains(err.Error(), "rank-0-of-1.json: "+c.want) {
				t.Fatalf("Decode: %v, want ErrMismatch naming %q", err, c.want)
			}
			sh, err := Split(fp, st)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sh.Restore(fp, 0, 1); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Restore: %v, want ErrMismatch naming %q", err, c.want)
			}
		})
	}
}
