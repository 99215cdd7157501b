package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"

	pb "github.com/dataloaderd/dataloaderd/api/proto/dataloader/v1"
	"github.com/dataloaderd/dataloaderd/internal/session"
)

type batchStream = grpc.BidiStreamingServer[pb.BatchesRequest, pb.Batch]

// Batches implements Loader: the first message attaches a consumer, later
// ones release slots; the server sends each batch in step order, then one
// message with end set when the rank's iteration is over (a change of
// weights may take that end back: the batches made again follow, and their
// end, in a newer generation). A consumer that
// attached with shm_control takes batches from the ring's control block and
// gets only the end message. A consumer whose stream breaks without
// CloseSession has disappeared: its session and ring are reclaimed, or, with
// --keep-detached, when its process died, kept for a new process to take
// its place (internal/session/keep.go).
func (s *Server) Batches(bs batchStream) error {
	first, err := bs.Recv()
	if err != nil {
		return s.fail(err)
	}
	att := first.GetAttach()
	if att == nil {
		return s.fail(fmt.Errorf("%w: the first message of a batch stream must be attach", session.ErrBadRequest))
	}
	uid, err := callerUID(bs.Context())
	if err != nil {
		return s.fail(err)
	}
	feed, err := s.sessions.Attach(uid, att.GetSessionId(), int(att.GetConsumer()), att.GetShmControl())
	if errors.Is(err, session.ErrSessionClosed) {
		// The consumers' close overtook this attach: a normal end.
		return toStatus(err)
	}
	if err != nil {
		return s.fail(err)
	}
	// Whether its process died, when the stream ends without a close.
	feed.Follow(callerPID(bs.Context()))
	ctx, cancel := context.WithCancel(bs.Context())
	defer cancel()

	// Releases arrive on their own goroutine; its error ends the stream.
	recvErr := make(chan error, 1)
	if att.GetShmControl() {
		go func() {
			recvErr <- noMessages(bs)
			cancel()
		}()
		err = watch(ctx, bs, feed)
	} else {
		go func() {
			recvErr <- releases(bs, feed)
			cancel()
		}()
		err = send(ctx, bs, feed)
	}
	if err == nil {
		// The iteration ended: keep taking releases until the client goes.
		err = <-recvErr
	} else if errors.Is(err, context.Canceled) {
		// A failed receive cancels the send: report the receive's cause. A
		// failed send (session closed, daemon stopping) returns at once; the
		// pending Recv ends with the handler.
		select {
		case re := <-recvErr:
			err = re
		case <-time.After(time.Second):
		}
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	expected := feed.Detach(err)
	switch {
	case err == nil, errors.Is(err, context.Canceled):
		return nil
	case expected:
		// The consumer closed its session (and then cancelled this stream,
		// or the close ended it), or the daemon is stopping: not a failure,
		// so not counted.
		return toStatus(err)
	}
	return s.fail(err)
}

// send hands the consumer every batch in step order, and the end message
// after the last. It goes on after the end: a change of weights that remakes
// batches past the consumer's step takes the end back (the consumer drops
// that end by its older generation), and the batches made again and their
// end follow. It returns when the stream or the session ends.
func send(ctx context.Context, bs batchStream, feed *session.Feed) error {
	for {
		b, err := feed.Next(ctx)
		if err != nil {
			return err
		}
		if b.End {
			if err := bs.Send(&pb.Batch{Step: b.Step, End: true, Generation: b.Generation}); err != nil {
				return err
			}
			continue
		}
		// The message is serialized before Send returns, while the consumer
		// still holds the slot Data points into.
		if err := bs.Send(&pb.Batch{Step: b.Step, Slot: uint32(b.Slot), Lines: uint32(b.Lines), Data: b.Data,
			Segments: uint32(b.Segments), MaxSeqlen: uint32(b.MaxSeqlen), Generation: b.Generation}); err != nil {
			return err
		}
	}
}

// watch serves a consumer of the control block: the end message once the
// producer stopped, or the production error.
func watch(ctx context.Context, bs batchStream, feed *session.Feed) error {
	last, err := feed.Watch(ctx)
	if err != nil {
		return err
	}
	return bs.Send(&pb.Batch{Step: last, End: true})
}

// noMessages waits for the end of a control-block consumer's stream, which
// carries no message after the attach.
func noMessages(bs batchStream) error {
	if _, err := bs.Recv(); err != nil {
		return err
	}
	return fmt.Errorf("%w: a shm_control consumer releases slots in the control block, not with messages", session.ErrBadRequest)
}

// releases applies the consumer's releases until the stream ends.
func releases(bs batchStream, feed *session.Feed) error {
	for {
		m, err := bs.Recv()
		if err != nil {
			return err
		}
		r := m.GetRelease()
		if r == nil {
			return fmt.Errorf("%w: after attach, a batch stream takes only release messages", session.ErrBadRequest)
		}
		if err := feed.Release(int(r.GetSlot()), r.GetStep(), r.GetWaitNs()); err != nil {
			return err
		}
	}
}
