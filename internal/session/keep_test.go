package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	dto "github.com/prometheus/client_model/go"

	"github.com/dataloaderd/dataloaderd/internal/ring"
)

// keepFor is the KeepDetached of these tests: long enough that nothing
// expires unless a test moves the reaper's clock.
const keepFor = time.Hour

// consumer reads one consumer's batches by messages, each as its bytes
// (inline: the message's; shm: the ring file's slot).
type consumer struct {
	t    *testing.T
	o    Opened
	feed *Feed
	// held is the batch handed and not released yet, if any.
	held *Batch
}

func attachConsumer(t *testing.T, m *Manager, o Opened) *consumer {
	t.Helper()
	feed, err := m.Attach(0, o.ID, o.Consumer, false)
	if err != nil {
		t.Fatal(err)
	}
	return &consumer{t: t, o: o, feed: feed}
}

// take releases the batch held, then takes the next: its step and bytes.
func (c *consumer) take() (uint64, []byte) {
	c.t.Helper()
	step, data, err := c.next()
	if err != nil {
		c.t.Fatal(err)
	}
	return step, data
}

// next is take, for any goroutine.
func (c *consumer) next() (uint64, []byte, error) {
	if c.held != nil {
		if err := c.feed.Release(c.held.Slot, c.held.Step, 0); err != nil {
			return 0, nil, err
		}
	}
	b, err := c.feed.Next(ctxT(c.t))
	if err != nil || b.End {
		return 0, nil, fmt.Errorf("next batch: %+v, %v", b, err)
	}
	c.held = &b
	data := b.Data
	if c.o.Ring.Path != "" {
		mem, err := os.ReadFile(c.o.Ring.Path)
		if err != nil {
			return 0, nil, err
		}
		off := c.o.Ring.DataOffset + b.Slot*c.o.Ring.Stride
		data = mem[off : off+b.Lines*c.o.LineTokens*tokenBytes]
	}
	return b.Step, bytes.Clone(data), nil
}

// die ends the consumer's stream as a killed process's ends: no release,
// no close.
func (c *consumer) die() { c.feed.Detach(context.Canceled) }

// refStream is the first n batches of req's rank, read by a consumer that
// never dies (in a session of another job).
func refStream(t *testing.T, m *Manager, req Request, n int) [][]byte {
	t.Helper()
	req.Job = "reference-" + req.Job
	o := mustOpen(t, m, req)
	c := attachConsumer(t, m, o)
	var out [][]byte
	for i := 0; i < n; i++ {
		_, data := c.take()
		out = append(out, data)
	}
	if err := m.Close(0, o.ID, 0); err != nil {
		t.Fatal(err)
	}
	c.feed.Detach(nil)
	return out
}

// TestKeptSessionGoesOn: a consumer's process dies (its stream ends
// without a close) at random steps, holding a batch it was handed; a new
// process opening the same job and rank with the same request takes its
// place in the same session and goes on from the last batch released: the
// batch held is handed again, then the rest. What every process took is
// the uninterrupted stream, repeated only where a process died holding a
// batch. For the shm and inline transports.
func TestKeptSessionGoesOn(t *testing.T) {
	for _, tr := range []Transport{Shm, Inline} {
		t.Run(tr.String(), func(t *testing.T) {
			m := newManager(t, Config{KeepDetached: keepFor})
			req := Request{Job: "j", DPRank: 1, DPSize: 2, Slots: 3, Transport: tr, Config: jobConfig(t, t.TempDir(), 0)}
			const n = 40
			want := refStream(t, m, req, n)
			rng := rand.New(rand.NewSource(int64(tr)))
			o := mustOpen(t, m, req)
			id := o.ID
			c := attachConsumer(t, m, o)
			var got [][]byte
			for len(got) < n {
				step, data := c.take()
				if int(step) != len(got)+1 {
					t.Fatalf("step %d after %d batches", step, len(got))
				}
				got = append(got, data)
				if len(got) == n || rng.Intn(5) > 0 {
					continue
				}
				c.die() // holding step: it comes again
				got = got[:len(got)-1]
				if m.Sessions() != 1 {
					t.Fatalf("%d sessions after the consumer's process died, want it kept", m.Sessions())
				}
				o = mustOpen(t, m, req)
				if !o.Continued || o.ID != id || o.Consumer != 0 || o.StartStep != step-1 {
					t.Fatalf("open after the death at step %d: %+v, want session %s continued after step %d", step, o, id, step-1)
				}
				c = attachConsumer(t, m, o)
			}
			for i := range want {
				if !bytes.Equal(got[i], want[i]) {
					t.Fatalf("step %d differs from the uninterrupted stream's", i+1)
				}
			}
		})
	}
}

// TestKeptSessionControlBlock: a consumer of the control block that dies
// is followed from the last release it wrote there, even one the daemon's
// watcher had not applied yet.
func TestKeptSessionControlBlock(t *testing.T) {
	m := newManager(t, Config{KeepDetached: keepFor})
	req := Request{Job: "c", DPSize: 1, Slots: 4, Config: jobConfig(t, t.TempDir(), 0)}
	o := mustOpen(t, m, req)
	feed, err := m.Attach(0, o.ID, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	mem := mapShared(t, o.Ring.ControlPath, o.Ring.ControlBytes)
	u64 := func(off int) *uint64 { return (*uint64)(unsafe.Pointer(&mem[off])) }
	u32 := func(off int) *uint32 { return (*uint32)(unsafe.Pointer(&mem[off])) }
	for deadline := time.Now().Add(10 * time.Second); atomic.LoadUint64(u64(ring.HeaderPublished)) < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("step 3 not published in 10 s")
		}
	}
	atomic.StoreUint64(u64(int(atomic.LoadUint32(u32(ring.HeaderConsumerRecords)))+ring.ConsumerRecordReleased), 3)
	feed.Detach(context.Canceled) // no watcher ran: step 3 was never applied
	again := mustOpen(t, m, req)
	if !again.Continued || again.StartStep != 3 {
		t.Fatalf("open after the death: %+v, want continued after step 3 (released in the block)", again)
	}
	if _, err := m.Attach(0, o.ID, 0, true); err != nil {
		t.Fatal(err)
	}
}

// TestKeptGroup: of a group of two consumers, one dies holding a batch;
// the other reads on as far as the ring lets it, a new process takes the
// dead one's place, and both consumers' streams are whole.
func TestKeptGroup(t *testing.T) {
	m := newManager(t, Config{KeepDetached: keepFor})
	req := Request{Job: "g", DPSize: 1, Consumers: 2, Slots: 4, Transport: Inline, Config: jobConfig(t, t.TempDir(), 0)}
	const n = 20
	want := refStream(t, m, Request{Job: "g", DPSize: 1, Slots: 4, Transport: Inline, Config: req.Config}, n)
	a, b := attachConsumer(t, m, mustOpen(t, m, req)), attachConsumer(t, m, mustOpen(t, m, req))
	var got [2][][]byte
	for i := 0; i < 5; i++ {
		for k, c := range []*consumer{a, b} {
			_, data := c.take()
			got[k] = append(got[k], data)
		}
	}
	a.die()
	got[0] = got[0][:4]
	for i := 0; i < 3; i++ { // within the ring: step 5 is still held by the dead one
		_, data := b.take()
		got[1] = append(got[1], data)
	}
	o := mustOpen(t, m, req)
	if !o.Continued || o.Consumer != 0 || o.StartStep != 4 {
		t.Fatalf("open of the group after consumer 0 died: %+v", o)
	}
	a = attachConsumer(t, m, o)
	// Each on its own, as processes read: either waits for the other's
	// releases when the ring is full.
	done := make(chan error)
	go func() {
		for len(got[1]) < n {
			_, data, err := b.next()
			if err != nil {
				done <- err
				return
			}
			got[1] = append(got[1], data)
		}
		done <- nil
	}()
	for len(got[0]) < n {
		_, data := a.take()
		got[0] = append(got[0], data)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for k := range got {
		for i := range want {
			if !bytes.Equal(got[k][i], want[i]) {
				t.Fatalf("consumer %d step %d differs from the uninterrupted stream's", k, i+1)
			}
		}
	}
}

// TestKeptSessionRules: the place of a dead consumer is its user's, for
// its job and rank, with its config: another user's open makes its own
// session, another config is refused naming it, a fresh start replaces the
// session; no process within KeepDetached and the session is reclaimed,
// its ring file gone; each outcome is counted.
func TestKeptSessionRules(t *testing.T) {
	m := newManager(t, Config{KeepDetached: keepFor})
	req := Request{Job: "r", DPSize: 1, Slots: 3, Config: jobConfig(t, t.TempDir(), 0)}
	dieAfter := func(steps int) Opened {
		t.Helper()
		o := mustOpen(t, m, req)
		c := attachConsumer(t, m, o)
		for i := 0; i < steps; i++ {
			c.take()
		}
		c.die()
		return o
	}
	o := dieAfter(3)
	other := req
	other.UID = 1000
	if mine := mustOpen(t, m, other); mine.Continued || mine.ID == o.ID || mine.StartStep != 0 {
		t.Fatalf("another user's open: %+v", mine)
	}
	changed := req
	changed.Config.Seed++
	if _, err := m.Open(ctxT(t), changed); !errors.Is(err, ErrConfigDiffers) || !bytes.Contains([]byte(err.Error()), []byte("the job config")) {
		t.Fatalf("open with another config: %v", err)
	}
	fresh := req
	fresh.Fresh = true
	if f := mustOpen(t, m, fresh); f.Continued || f.ID == o.ID || f.StartStep != 0 {
		t.Fatalf("fresh open: %+v", f)
	}
	if lost(t, m, outcomeFresh) != 1 {
		t.Fatal("the fresh start was not counted")
	}
	if err := m.Close(0, m.sessions[sessionKey{job: "r"}].id, 0); err != nil {
		t.Fatal(err)
	}
	o = dieAfter(2)
	if _, err := os.Stat(o.Ring.Path); err != nil {
		t.Fatalf("the kept session's ring: %v", err)
	}
	m.reapAt(time.Now().Add(keepFor / 2))
	if _, err := os.Stat(o.Ring.Path); err != nil {
		t.Fatalf("the ring went before --keep-detached: %v", err)
	}
	m.reapAt(time.Now().Add(keepFor + time.Second))
	if _, err := os.Stat(o.Ring.Path); !os.IsNotExist(err) {
		t.Fatalf("the ring of a session kept past --keep-detached: %v", err)
	}
	if lost(t, m, outcomeExpired) != 1 {
		t.Fatal("the expiry was not counted")
	}
	if again := mustOpen(t, m, req); again.Continued || again.StartStep != 0 {
		t.Fatalf("open after the expiry: %+v", again)
	}
}

// TestKeptOnlyForDeadProcesses: a stream that ends without a close while
// its process lives (a loader that gave up waiting) is reclaimed at once,
// as without KeepDetached; one whose process was killed is kept, and an
// open that comes before the daemon saw the stream end waits for it; so is
// one whose process died between its open and its stream's attach.
func TestKeptOnlyForDeadProcesses(t *testing.T) {
	m := newManager(t, Config{KeepDetached: keepFor})
	req := Request{Job: "p", DPSize: 1, Slots: 3, Config: jobConfig(t, t.TempDir(), 0)}
	o := mustOpen(t, m, req)
	c := attachConsumer(t, m, o)
	c.feed.Follow(int32(os.Getpid()))
	c.take()
	c.die()
	if m.Sessions() != 0 {
		t.Fatal("the session of a live process's ended stream was kept")
	}
	proc, err := os.StartProcess("/bin/sleep", []string{"sleep", "60"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	o = mustOpen(t, m, req)
	c = attachConsumer(t, m, o)
	c.feed.Follow(int32(proc.Pid))
	c.take()
	if err := proc.Kill(); err != nil {
		t.Fatal(err)
	}
	_, _ = proc.Wait()
	// The new process's open comes before the daemon saw the stream end:
	// it waits for it, and takes the place.
	go func() { time.Sleep(50 * time.Millisecond); c.die() }()
	if again := mustOpen(t, m, req); !again.Continued || again.ID != o.ID {
		t.Fatalf("open after the process was killed: %+v", again)
	}

	// A process that dies after its open, before its stream attached.
	proc, err = os.StartProcess("/bin/sleep", []string{"sleep", "60"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	early := req
	early.Job, early.PID = "early", int32(proc.Pid)
	o = mustOpen(t, m, early)
	if err := proc.Kill(); err != nil {
		t.Fatal(err)
	}
	_, _ = proc.Wait()
	early.PID = 0
	if again := mustOpen(t, m, early); !again.Continued || again.ID != o.ID || again.StartStep != 0 {
		t.Fatalf("open after the opener died before attaching: %+v", again)
	}
}

// A replacement that dies after its open, before its stream attached, and
// no open comes for longer than AttachWithin: the place is kept (the
// reaper sees the process gone), not the session reclaimed as stale, and
// the next process goes on where the first one left off.
func TestKeptPastAttachWithin(t *testing.T) {
	const within = time.Second
	m := newManager(t, Config{KeepDetached: keepFor, AttachWithin: within})
	req := Request{Job: "w", DPSize: 1, Slots: 3, Config: jobConfig(t, t.TempDir(), 0)}
	want := refStream(t, m, Request{Job: "w-ref", DPSize: 1, Slots: 3, Config: req.Config}, 4)
	c := attachConsumer(t, m, mustOpen(t, m, req))
	c.take()
	c.take()
	c.die() // the test's own process lives: followed by none, the session is kept
	proc, err := os.StartProcess("/bin/sleep", []string{"sleep", "60"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	crash := req
	crash.PID = int32(proc.Pid)
	if o := mustOpen(t, m, crash); !o.Continued || o.StartStep != 1 {
		t.Fatalf("the replacement's open: %+v", o)
	}
	if err := proc.Kill(); err != nil {
		t.Fatal(err)
	}
	_, _ = proc.Wait()
	m.reapAt(time.Now().Add(3 * within))
	if m.Sessions() != 1 {
		t.Fatal("the session was reclaimed when its replacement died before attaching")
	}
	o := mustOpen(t, m, req)
	if !o.Continued || o.StartStep != 1 {
		t.Fatalf("the open after the replacement died: %+v", o)
	}
	c = attachConsumer(t, m, o)
	for s := 2; s <= 3; s++ {
		if step, got := c.take(); step != uint64(s) || !bytes.Equal(got, want[s-1]) {
			t.Fatalf("step %d after the second replacement: got step %d, equal %v", s, step, bytes.Equal(got, want[s-1]))
		}
	}
}

// lost is dataloaderd_lost_consumers_total{outcome}.
func lost(t *testing.T, m *Manager, outcome string) float64 {
	t.Helper()
	var out dto.Metric
	if err := m.metrics.lostConsumers.WithLabelValues(outcome).Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetCounter().GetValue()
}
