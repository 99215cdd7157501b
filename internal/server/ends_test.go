package server_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	pb "github.com/dataloaderd/dataloaderd/api/proto/dataloader/v1"
	"github.com/dataloaderd/dataloaderd/internal/session"
)

// errorsByKind is dataloaderd_errors_total, by kind.
func (d *daemon) errorsByKind(t *testing.T) map[string]float64 {
	t.Helper()
	fams, err := d.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "dataloaderd_errors_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	return out
}

type stream = grpc.BidiStreamingClient[pb.BatchesRequest, pb.Batch]

// drain reads a message stream, releasing every batch, until it ends; it
// returns the error that ended it (nil after the end message).
func drain(bs stream, limit int) error {
	for i := 0; limit == 0 || i < limit; i++ {
		b, err := bs.Recv()
		if err != nil {
			return err
		}
		if b.GetEnd() {
			return nil
		}
		release(bs, b)
	}
	return nil
}

// TestNormalEndsAreNoErrors: what a healthy job does counts nothing in
// dataloaderd_errors_total, as the Python client does it (close the
// session, then cancel the stream): a consumer that stops mid-run, by
// messages and on the control block; one that read a bounded run to its
// end; a consumer of a two-process group; and the streams a stop of the
// daemon ends.
func TestNormalEndsAreNoErrors(t *testing.T) {
	d := startDaemon(t, session.Config{})
	ctx := ctxT(t)
	cfg := d.config(t)
	closeThenCancel := func(o *pb.OpenSessionResponse, cancel context.CancelFunc) {
		t.Helper()
		if _, err := d.client.CloseSession(ctx, &pb.CloseSessionRequest{SessionId: o.GetSessionId(), Consumer: o.GetConsumer()}); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	open := func(job string, cfg *pb.JobConfig, consumers uint32) *pb.OpenSessionResponse {
		t.Helper()
		o, err := d.client.OpenSession(ctx, &pb.OpenSessionRequest{Job: job, Config: cfg, DpSize: 1, Consumers: consumers})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}

	// Mid-run, by messages: the close ends the stream (Unavailable), then
	// the client cancels it.
	o := open("mid", cfg, 1)
	sctx, cancel := context.WithCancel(ctx)
	bs := d.attach(t, sctx, o, false)
	if err := drain(bs, 3); err != nil {
		t.Fatal(err)
	}
	closeThenCancel(o, cancel)

	// Mid-run, on the control block.
	o = open("ctl", cfg, 1)
	sctx, cancel = context.WithCancel(ctx)
	d.attach(t, sctx, o, true)
	view := mapControl(t, o.GetRing())
	view.next(1)
	view.release(0, 1)
	closeThenCancel(o, cancel)

	// A bounded run read to its end: the stream stays open after the end
	// message until the client, having closed, cancels it.
	bounded := d.config(t)
	bounded.Epochs = 1
	o = open("end", bounded, 1)
	sctx, cancel = context.WithCancel(ctx)
	if err := drain(d.attach(t, sctx, o, false), 0); err != nil {
		t.Fatal(err)
	}
	closeThenCancel(o, cancel)

	// A group of two: the first to close cancels its stream while the
	// other still reads.
	a, b := open("tp", cfg, 2), open("tp", cfg, 2)
	actx, acancel := context.WithCancel(ctx)
	bctx, bcancel := context.WithCancel(ctx)
	as, bs2 := d.attach(t, actx, a, false), d.attach(t, bctx, b, false)
	if err := drain(as, 1); err != nil {
		t.Fatal(err)
	}
	if err := drain(bs2, 1); err != nil {
		t.Fatal(err)
	}
	closeThenCancel(a, acancel)
	closeThenCancel(b, bcancel)
	waitSessions(t, d, 0)

	// A stream the daemon's stop ends.
	o = open("stop", cfg, 1)
	live := d.attach(t, ctx, o, false)
	if err := drain(live, 1); err != nil {
		t.Fatal(err)
	}
	if err := d.stop(); err != context.Canceled {
		t.Fatalf("stop: %v", err)
	}
	if err := drain(live, 0); code(err) != codes.Unavailable {
		t.Fatalf("the stop ended the stream with %v, want Unavailable", err)
	}
	// Serve has returned: every handler has, and has counted what it counts.
	if errs := d.errorsByKind(t); len(errs) != 0 {
		t.Fatalf("errors counted for normal ends: %v", errs)
	}
}

// TestFailuresAreErrors: failures still count: a consumer whose stream
// breaks without closing its session (a dead process), a duplicate open,
// an unknown session.
func TestFailuresAreErrors(t *testing.T) {
	d := startDaemon(t, session.Config{})
	ctx := ctxT(t)
	cfg := d.config(t)
	o, err := d.client.OpenSession(ctx, &pb.OpenSessionRequest{Job: "j", Config: cfg, DpSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.client.OpenSession(ctx, &pb.OpenSessionRequest{Job: "j", Config: cfg, DpSize: 1}); code(err) != codes.AlreadyExists {
		t.Fatalf("duplicate: %v", err)
	}
	sctx, cancel := context.WithCancel(ctx)
	if err := drain(d.attach(t, sctx, o, false), 2); err != nil {
		t.Fatal(err)
	}
	cancel() // without CloseSession
	waitSessions(t, d, 0)
	if _, err := d.client.CloseSession(ctx, &pb.CloseSessionRequest{SessionId: o.GetSessionId()}); code(err) != codes.NotFound {
		t.Fatalf("close of a reclaimed session: %v", err)
	}
	if err := d.stop(); err != context.Canceled {
		t.Fatalf("stop: %v", err)
	}
	want := map[string]float64{"AlreadyExists": 1, "Canceled": 1, "NotFound": 1}
	got := d.errorsByKind(t)
	if len(got) != len(want) {
		t.Fatalf("errors %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("errors %v, want %v", got, want)
		}
	}
}
