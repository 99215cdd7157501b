package session

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/state"
	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// saveTwoRanks runs a world of 2 ranks a few batches and saves both into a
// checkpoint folder, which it returns.
func saveTwoRanks(t *testing.T, m *Manager, cfg stream.Config) string {
	t.Helper()
	folder := t.TempDir()
	for r := uint32(0); r < 2; r++ {
		o := mustOpen(t, m, Request{Job: "src", DPRank: r, DPSize: 2, Transport: Inline, Config: cfg})
		feed, err := m.Attach(0, o.ID, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		takeSome(t, feed, 3)
		if _, err := m.Save(0, o.ID, 3, folder); err != nil {
			t.Fatal(err)
		}
		if err := m.Close(0, o.ID, 0); err != nil {
			t.Fatal(err)
		}
	}
	return folder
}

// TestResumeReadsOnlyItsFiles: a rank resuming on as many ranks reads its
// own rank file whole, and of its peers' only the start, which gives their
// step: a peer's file damaged after its step does not stop it, one damaged
// before it is refused by name. Before, every rank read (and parsed) every
// file of the world.
func TestResumeReadsOnlyItsFiles(t *testing.T) {
	m := newManager(t, Config{})
	cfg := jobConfig(t, t.TempDir(), 0)
	folder := saveTwoRanks(t, m, cfg)
	path := filepath.Join(folder, state.Dir, "rank-1-of-2.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cut := strings.Index(string(b), `"fingerprint"`)
	if cut < 0 {
		t.Fatalf("no fingerprint in %s", b)
	}
	if err := os.WriteFile(path, append(b[:cut:cut], "damaged"...), 0o600); err != nil {
		t.Fatal(err)
	}
	o := mustOpen(t, m, Request{Job: "again", DPRank: 0, DPSize: 2, Transport: Inline, Config: cfg, ResumeFrom: folder})
	if o.StartStep != 3 {
		t.Fatalf("resumed at step %d, want 3", o.StartStep)
	}
	_, err = m.Open(ctxT(t), Request{Job: "again", DPRank: 1, DPSize: 2, Transport: Inline, Config: cfg, ResumeFrom: folder})
	if !errors.Is(err, state.ErrMismatch) || !strings.Contains(err.Error(), "rank-1-of-2.json") {
		t.Fatalf("rank 1 resuming from its damaged file: %v", err)
	}
	if err := os.WriteFile(path, []byte("{damaged"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = m.Open(ctxT(t), Request{Job: "third", DPRank: 0, DPSize: 2, Transport: Inline, Config: cfg, ResumeFrom: folder})
	if !errors.Is(err, state.ErrMismatch) || !strings.Contains(err.Error(), path+": not a dataloaderd state file") {
		t.Fatalf("rank 0 resuming beside a peer's file damaged before its step: %v", err)
	}
}

// TestResumeFileBounded: a rank file past the largest state its rank could
// have written under the config is refused, naming the file and the bound,
// before it is read. Before, a file under the 256 MiB cap was read whole
// and decoded: a 175 MiB one OOM-killed the daemon in a 1 GiB cgroup. Here
// the file is the real state padded with spaces, which JSON allows: the
// daemon before took it.
func TestResumeFileBounded(t *testing.T) {
	m := newManager(t, Config{})
	cfg := jobConfig(t, t.TempDir(), 0)
	folder := saveTwoRanks(t, m, cfg)
	path := filepath.Join(folder, state.Dir, "rank-1-of-2.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pad := make([]byte, state.MaxLogBytes+1<<20)
	for i := range pad {
		pad[i] = ' '
	}
	if err := os.WriteFile(path, append(b, pad...), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = m.Open(ctxT(t), Request{Job: "again", DPRank: 1, DPSize: 2, Transport: Inline, Config: cfg, ResumeFrom: folder})
	if !errors.Is(err, state.ErrTooLarge) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "it was not read") {
		t.Fatalf("a padded rank file of %d bytes: %v", len(b)+len(pad), err)
	}
	mustOpen(t, m, Request{Job: "again", DPRank: 0, DPSize: 2, Transport: Inline, Config: cfg, ResumeFrom: folder})
}

// TestStateSizeRefusedAtOpen: a config whose state could outgrow what the
// daemon takes back is refused at open, naming the count to lower, before
// any corpus is opened. Before, a 90,000-point schedule or a rank owning
// 2^20 shards was accepted, and wrote states of 6 MB that the DCP load and
// the client's reconnect could not send back (over gRPC's 4 MiB limit).
func TestStateSizeRefusedAtOpen(t *testing.T) {
	m := newManager(t, Config{})
	base := jobConfig(t, t.TempDir(), 0)
	base.Datasets[0].Path = "/nonexistent/web" // never opened
	shards := base
	shards.LogicalShards = 1 << 20
	sched := base
	for i := 0; i < 90000; i++ {
		sched.Schedule = append(sched.Schedule, state.SchedulePoint{Step: uint64(i * 10), Weights: []float64{1}})
	}
	for _, c := range []struct {
		name string
		cfg  stream.Config
		want string
	}{
		{"2^20 shards on one rank", shards, "owns 1048576 of logical_shards 1048576 in each of 1 datasets"},
		{"90,000-point schedule", sched, "a schedule of 90000 points over 1 datasets"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := m.Open(ctxT(t), Request{Job: "big", DPRank: 0, DPSize: 1, Transport: Inline, Config: c.cfg})
			if !errors.Is(err, stream.ErrInvalidConfig) || !errors.Is(err, state.ErrTooLarge) || !strings.Contains(err.Error(), c.want) ||
				!strings.Contains(err.Error(), "(state.Max") {
				t.Fatalf("err = %v, want one naming %q and the bound", err, c.want)
			}
		})
	}
}

// TestManyEmptyStatesNameLazily: a request of 2^20 empty resume_states is
// refused at the first, by its name, without a name made for each entry.
// Before, restore built "resume_states[i]" for every entry before the
// merge looked at one: some 56 MiB allocated for a refusal (on top of what
// decoding the request took).
func TestManyEmptyStatesNameLazily(t *testing.T) {
	fp := state.Fingerprint{SeqLen: 8, LogicalShards: 8, Seed: 3, BOS: -1, ShuffleWindow: 8,
		Datasets: []state.DatasetPrint{{Name: "a", Format: "megatron", Files: 2, Bytes: 100, Units: 10, Digest: "x"}}}
	req := Request{ResumeStates: make([][]byte, 1<<20)}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := restore(fp, nil, req)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, state.ErrMismatch) || !strings.Contains(err.Error(), "resume_states[0]") {
		t.Fatalf("2^20 empty states: %v, want ErrMismatch naming resume_states[0]", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 8<<20 {
		t.Fatalf("refusing 2^20 empty states allocated %d MiB, want under 8", got>>20)
	}
}
