package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	pb "github.com/dataloaderd/dataloaderd/api/proto/dataloader/v1"
	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// Batches implements Loader: the first message attaches a consumer, later
// ones release slots; the server sends each batch in step order, then one
// message with end set when the rank's iteration is over. A consumer whose
// stream breaks without CloseSession has disappeared: its session and ring
// are reclaimed.
func (s *Server) Batches(bs grpc.BidiStreamingServer[pb.BatchesRequest, pb.Batch]) error {
	first, err := bs.Recv()
	if err != nil {
		return s.fail(err)
	}
	att := first.GetAttach()
	if att == nil {
		return s.fail(fmt.Errorf("%w: the first message of a batch stream must be attach", errBadRequest))
	}
	ss, err := s.lookup(att.GetSessionId())
	if err != nil {
		return s.fail(err)
	}
	if att.GetShmControl() && ss.ctl == nil {
		// Refused before the consumer counts as attached: the session and
		// its other consumers are not affected.
		return s.fail(fmt.Errorf("%w: shm_control needs a ring with a control block (shm or cuda); session %s is %s", errBadRequest, ss.id, ss.transport))
	}
	if err := ss.attach(att.GetConsumer()); err != nil {
		return s.fail(err)
	}
	c := int(att.GetConsumer())
	ctx, cancel := context.WithCancel(bs.Context())
	defer cancel()

	// Releases arrive on their own goroutine; its error ends the stream.
	recvErr := make(chan error, 1)
	if att.GetShmControl() {
		go func() {
			recvErr <- s.noMessages(bs)
			cancel()
		}()
		err = s.watch(ctx, bs, ss, c)
	} else {
		go func() {
			recvErr <- s.releases(bs, ss, c)
			cancel()
		}()
		err = s.send(ctx, bs, ss, c)
	}
	if err == nil {
		// The iteration ended: keep taking releases until the client goes.
		err = <-recvErr
	} else {
		// A failed receive cancels the send: report the receive's cause. A
		// failed send (session closed, daemon stopping) returns at once; the
		// pending Recv ends with the handler.
		if errors.Is(err, context.Canceled) {
			select {
			case re := <-recvErr:
				err = re
			case <-time.After(time.Second):
			}
		}
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	ss.mu.Lock()
	closed := ss.closed[c]
	ss.mu.Unlock()
	if !closed {
		s.drop(ss, fmt.Sprintf("consumer %d's batch stream ended without close: %v", c, err))
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return s.fail(err)
	}
	return nil
}

// send hands consumer c every batch in step order; nil after the end message.
func (s *Server) send(ctx context.Context, bs grpc.BidiStreamingServer[pb.BatchesRequest, pb.Batch], ss *session, c int) error {
	cfg := ss.corpus.Config()
	lineBytes := cfg.LineTokens() * 4
	for {
		b, err := ss.pipeline.Next(ctx, c)
		if err != nil {
			return err
		}
		if b.End {
			return bs.Send(&pb.Batch{Step: b.Step, End: true})
		}
		msg := &pb.Batch{Step: b.Step, Slot: uint32(b.Slot), Lines: uint32(b.Lines)}
		if ss.transport == pb.Transport_TRANSPORT_INLINE.String() {
			// Inline: the slot is held until the client releases it, and the
			// message is serialized before Send returns, so no copy is needed.
			msg.Data = ss.ring.Slot(b.Slot)[:b.Lines*lineBytes]
		}
		if err := bs.Send(msg); err != nil {
			return err
		}
	}
}

// watch serves a consumer that reads the ring's control block: it applies
// the releases the consumer writes there (sleeping on the release futex,
// woken by the consumer when the producer waits for a slot, else every
// watchPoll) until the producer stops, then sends the end message, or
// returns the production error.
func (s *Server) watch(ctx context.Context, bs grpc.BidiStreamingServer[pb.BatchesRequest, pb.Batch], ss *session, c int) error {
	ctl := ss.ctl
	stop := context.AfterFunc(ctx, ctl.WakeReleaseWatchers)
	defer stop()
	ended := make(chan struct{})
	var last uint64
	var endErr error
	go func() {
		defer close(ended)
		last, endErr = ss.pipeline.Wait(ctx)
	}()
	var applied uint64
	backoff := minWatchPoll
	for {
		seq := ctl.ReleaseSeq()
		if r := ctl.Released(c); r > applied {
			if err := ss.pipeline.ReleaseThrough(c, r); err != nil {
				ss.log.Warn("bad release", zap.Int("consumer", c), zap.Error(err))
				return err
			}
			applied = r
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ended:
			if endErr != nil {
				return endErr
			}
			return bs.Send(&pb.Batch{Step: last, End: true})
		default:
		}
		// While the producer waits for a slot, look again soon even if no
		// client wakes us: a client's wake-up can be lost (its release store
		// and its look at "producer waiting" are not ordered, see
		// _control.py), so back off from minWatchPoll instead of sleeping a
		// whole watchPoll.
		timeout := watchPoll
		if ctl.ProducerWaiting() {
			timeout = backoff
			backoff = min(2*backoff, watchPoll)
		} else {
			backoff = minWatchPoll
		}
		ctl.WaitRelease(seq, timeout)
	}
}

// watchPoll is how often a release watcher looks at the control block when
// nobody wakes it and the producer does not wait: releases then only move
// the saved state's base. minWatchPoll is its first look while the producer
// waits for a slot.
const (
	watchPoll    = 20 * time.Millisecond
	minWatchPoll = 50 * time.Microsecond
)

// noMessages waits for the end of a control-block consumer's stream, which
// carries no message after the attach.
func (s *Server) noMessages(bs grpc.BidiStreamingServer[pb.BatchesRequest, pb.Batch]) error {
	if _, err := bs.Recv(); err != nil {
		return err
	}
	return fmt.Errorf("%w: a shm_control consumer releases slots in the control block, not with messages", errBadRequest)
}

// releases applies consumer c's releases until the stream ends.
func (s *Server) releases(bs grpc.BidiStreamingServer[pb.BatchesRequest, pb.Batch], ss *session, c int) error {
	for {
		m, err := bs.Recv()
		if err != nil {
			return err
		}
		r := m.GetRelease()
		if r == nil {
			return fmt.Errorf("%w: after attach, a batch stream takes only release messages", errBadRequest)
		}
		if err := ss.pipeline.Release(c, int(r.GetSlot()), r.GetStep()); err != nil {
			ss.log.Warn("bad release", zap.Int("consumer", c), zap.Error(err))
			return err
		}
		if r.GetWaitNs() > 0 {
			s.metrics.clientWait.observe(r.GetWaitNs())
		}
	}
}

// configFrom converts the wire config into the stream package's.
func configFrom(c *pb.JobConfig) (stream.Config, error) {
	if c == nil {
		return stream.Config{}, fmt.Errorf("%w: config is missing", stream.ErrInvalidConfig)
	}
	out := stream.Config{
		SeqLen: c.GetSeqLen(), BatchSize: c.GetBatchSize(), Seed: c.GetSeed(), LogicalShards: c.GetLogicalShards(),
		EOS: c.GetEosId(), BOS: c.GetBosId(), Pad: c.GetPadId(), Epochs: c.GetEpochs(), ShuffleWindow: c.GetShuffleWindow(),
	}
	for _, d := range c.GetDatasets() {
		out.Datasets = append(out.Datasets, stream.Dataset{
			Name: d.GetName(), Path: d.GetPath(), Format: d.GetFormat(), Weight: d.GetWeight(), Dtype: d.GetDtype(),
			Field: d.GetField(), Tokenizer: d.GetTokenizer(), OnBadRecord: d.GetOnBadRecord(),
		})
	}
	return out, nil
}
