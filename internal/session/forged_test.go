package session

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dataloaderd/dataloaderd/internal/state"
)

// TestForgedStatesRefusedAtOpen: a state file is input from outside. One
// edited field (a flipped digit) that puts a cursor past its shard, an
// offset past its unit, a step near 2^64, taken past a window, or a
// mixture log that does not fit, is refused when the session opens, naming
// the rank files' folder, the shard and the field. Before, a cursor past
// its shard made the producer walk forever (a core at 100%, the session
// could not be closed) and step 2^64-1 hung with no error.
func TestForgedStatesRefusedAtOpen(t *testing.T) {
	m := newManager(t, Config{})
	cfg := jobConfig(t, t.TempDir(), 0)
	o := mustOpen(t, m, Request{Job: "src", DPRank: 0, DPSize: 1, Transport: Inline, Config: cfg})
	feed, err := m.Attach(0, o.ID, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	takeSome(t, feed, 3)
	folder := t.TempDir()
	saved, err := m.Save(0, o.ID, 3, folder)
	if err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(saved.Path)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, want string
		edit       func(f map[string]any)
	}{
		{"position past the shard", "position 1000000 is past the shard's", func(f map[string]any) { column(f, "pos")[0] = 1000000 }},
		{"offset past the unit", "offset 999999 is past the", func(f map[string]any) {
			column(f, "offset")[0] = 999999
		}},
		{"step near 2^64", "restored step 18446744073709551615", func(f map[string]any) { f["step"] = uint64(1<<64 - 1) }},
		{"taken past a window", "taken", func(f map[string]any) { column(f, "taken")[1] = 1 << 40 }},
		{"lines beyond any run", "lines 9223372036854775807", func(f map[string]any) { column(f, "lines")[2] = 1<<63 - 1 }},
		{"mixture log after the step", "mixture log entry at step 99", func(f map[string]any) {
			f["mixture"] = []any{map[string]any{"step": 99, "weights": []float64{1}}}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var f map[string]any
			dec := json.NewDecoder(strings.NewReader(string(good)))
			dec.UseNumber()
			if err := dec.Decode(&f); err != nil {
				t.Fatal(err)
			}
			c.edit(f)
			b, err := json.Marshal(f)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), state.Dir)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, filepath.Base(saved.Path)), b, 0o600); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := m.Open(ctxT(t), Request{Job: "r-" + c.name, DPRank: 0, DPSize: 1, Transport: Inline, Config: cfg,
					ResumeFrom: filepath.Dir(dir)})
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, state.ErrMismatch) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), dir) {
					t.Fatalf("open: %v, want a refusal naming %s and saying %q", err, dir, c.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the open of a forged state hangs")
			}
		})
	}
}

// column is the first dataset's column name of a decoded state file.
func column(f map[string]any, name string) []any {
	return f["shards"].([]any)[0].(map[string]any)[name].([]any)
}

// TestRankFilesMustBeSmallRegularFiles: a rank file that is a symlink to
// /dev/zero, or a FIFO, is refused at once, naming the file, and the
// (job, rank) opens afterwards. Before, /dev/zero was read until the daemon
// was OOM-killed, and a FIFO blocked the open for good, holding the key.
func TestRankFilesMustBeSmallRegularFiles(t *testing.T) {
	m := newManager(t, Config{})
	cfg := jobConfig(t, t.TempDir(), 0)
	for _, kind := range []string{"devzero", "fifo"} {
		t.Run(kind, func(t *testing.T) {
			folder := t.TempDir()
			dir := filepath.Join(folder, state.Dir)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			rankFile := filepath.Join(dir, state.FileName(0, 1))
			var err error
			if kind == "devzero" {
				err = os.Symlink("/dev/zero", rankFile)
			} else {
				err = unix.Mkfifo(rankFile, 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := m.Open(ctxT(t), Request{Job: kind, DPRank: 0, DPSize: 1, Transport: Inline, Config: cfg, ResumeFrom: folder})
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), rankFile) || !strings.Contains(err.Error(), "not a regular file") {
					t.Fatalf("open resuming from a %s rank file: %v", kind, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("the open resuming from a %s rank file hangs", kind)
			}
			if _, err := m.Open(ctxT(t), Request{Job: kind, DPRank: 0, DPSize: 1, Transport: Inline, Config: cfg}); err != nil {
				t.Fatalf("the (job, rank) after the refused open: %v", err)
			}
		})
	}
}
