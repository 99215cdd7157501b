package session

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestEnds: a stream's end is expected (no failure) when its consumer
// closed the session first, or when the daemon stops; a stream that ends
// without a close is not, and its session is reclaimed. Once its consumers
// closed a session, a late attach is told so and a second close is
// harmless.
func TestEnds(t *testing.T) {
	m := newManager(t, Config{})
	cfg := jobConfig(t, t.TempDir(), 0)

	o := mustOpen(t, m, Request{Job: "closed", DPSize: 1, Config: cfg})
	feed, err := m.Attach(0, o.ID, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(0, o.ID, 0); err != nil {
		t.Fatal(err)
	}
	if !feed.Detach(errors.New("stream cancelled")) {
		t.Error("the end of a closed consumer's stream is unexpected")
	}
	if err := m.Close(0, o.ID, 0); err != nil {
		t.Errorf("a second close: %v", err)
	}
	if _, err := m.Attach(0, o.ID, 0, false); !errors.Is(err, ErrSessionClosed) || !errors.Is(err, ErrNoSession) {
		t.Errorf("attach after close: %v, want ErrSessionClosed", err)
	} else if want := fmt.Sprintf("no such session: session %q was closed by its consumers", o.ID); err.Error() != want {
		// A reading consumer is told so in these words (goneErr); a later
		// call must say the same, whichever a client meets first.
		t.Errorf("attach after close: %q, want %q", err, want)
	}

	o = mustOpen(t, m, Request{Job: "gone", DPSize: 1, Config: cfg})
	feed, err = m.Attach(0, o.ID, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if feed.Detach(errors.New("stream cancelled")) {
		t.Error("a stream that ended without close is expected")
	}
	if m.Sessions() != 0 {
		t.Error("the session of a stream that ended without close was not reclaimed")
	}
	if err := m.Close(0, o.ID, 0); !errors.Is(err, ErrNoSession) || errors.Is(err, ErrSessionClosed) {
		t.Errorf("close of a reclaimed session: %v, want ErrNoSession", err)
	}

	o = mustOpen(t, m, Request{Job: "stop", DPSize: 1, Config: cfg})
	if feed, err = m.Attach(0, o.ID, 0, false); err != nil {
		t.Fatal(err)
	}
	m.Shutdown()
	if !feed.Detach(errors.New("closed")) {
		t.Error("the end of a stream at the daemon's stop is unexpected")
	}
}

// TestDuplicateSays: a second open of a one-consumer session names the
// likely causes and the fixes.
func TestDuplicateSays(t *testing.T) {
	m := newManager(t, Config{})
	cfg := jobConfig(t, t.TempDir(), 0)
	mustOpen(t, m, Request{Job: "none", DPSize: 1, Config: cfg})
	_, err := m.Open(ctxT(t), Request{Job: "none", DPSize: 1, Config: cfg})
	if !errors.Is(err, ErrSessionExists) {
		t.Fatalf("second open: %v", err)
	}
	for _, want := range []string{"duplicate session", "another job on this node uses the same job name",
		"Loader(job=...)", "DATALOADERD_JOB", "TORCHELASTIC_RUN_ID", "opened the same dp_rank twice", "consumers="} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
}

// TestSessionOfAnEarlierRun: a session id that an earlier run of the
// daemon gave (a daemon restarted since, its client not yet aware) is told
// apart from an unknown one: ErrDaemonRestarted, which the client takes as
// the daemon's absence and reopens its session (it used to be ErrNoSession,
// and a set_weights or save right after a restart raised
// SessionNotFoundError). An id of this run, or not of the form, stays
// ErrNoSession.
func TestSessionOfAnEarlierRun(t *testing.T) {
	cfg := jobConfig(t, t.TempDir(), 0)
	before := newManager(t, Config{})
	o := mustOpen(t, before, Request{Job: "j", DPSize: 1, Config: cfg})
	before.Shutdown()
	m := newManager(t, Config{})
	mine := mustOpen(t, m, Request{Job: "j", DPSize: 1, Config: cfg})
	if len(o.ID) != 24 || len(mine.ID) != 24 || o.ID[:runTagLen] == mine.ID[:runTagLen] {
		t.Fatalf("session ids %q and %q of two runs", o.ID, mine.ID)
	}
	if _, err := m.State(0, o.ID, 0); !errors.Is(err, ErrDaemonRestarted) || errors.Is(err, ErrNoSession) || !strings.Contains(err.Error(), o.ID) {
		t.Errorf("the state of a session of an earlier run: %v, want ErrDaemonRestarted naming it", err)
	}
	if _, err := m.Attach(0, o.ID, 0, false); !errors.Is(err, ErrDaemonRestarted) {
		t.Errorf("an attach to a session of an earlier run: %v, want ErrDaemonRestarted", err)
	}
	for _, id := range []string{mine.ID[:runTagLen] + strings.Repeat("0", 24-runTagLen), "nope", strings.Repeat("z", 24)} {
		if _, err := m.State(0, id, 0); !errors.Is(err, ErrNoSession) {
			t.Errorf("the state of session %q: %v, want ErrNoSession", id, err)
		}
	}
}
