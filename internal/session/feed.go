package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/dataloaderd/dataloaderd/internal/mapped"
	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// Feed is one consumer's attached batch stream. A consumer takes batches
// either by messages (Next, then Release of each) or, with a control block,
// from the ring itself (Watch applies the releases it writes there). Detach
// when the stream ends.
type Feed struct {
	m  *Manager
	ss *session
	c  int
	// life follows the consumer's process (Follow); nil: not followed.
	life *lifeline
}

// Attach marks consumer's batch stream of session id live. With control,
// the consumer reads announcements from and writes releases to the ring's
// control block, which the session's ring must then have.
func (m *Manager) Attach(uid uint32, id string, consumer int, control bool) (*Feed, error) {
	ss, err := m.lookup(uid, id)
	if err != nil {
		return nil, err
	}
	if control && ss.ctl == nil {
		// Refused before the consumer counts as attached: the session and
		// its other consumers are not affected.
		return nil, fmt.Errorf("%w: shm_control needs a ring with a control block (shm or cuda); session %s is %s",
			ErrBadRequest, ss.id, ss.transport)
	}
	if err := ss.attach(uint32(consumer)); err != nil {
		return nil, err
	}
	return &Feed{m: m, ss: ss, c: consumer}, nil
}

// Next blocks until the consumer's next batch is ready: its slot, and on
// the inline transport its bytes, which stay valid until the consumer
// releases the slot. After the rank's last batch it returns End, once: the
// next call waits until a change of weights takes that end back (the
// batches made again then come, in a newer Generation) or the session ends.
func (f *Feed) Next(ctx context.Context) (Batch, error) {
	b, err := f.ss.pipeline.Next(ctx, f.c)
	if err != nil {
		return Batch{}, f.why(err)
	}
	if b.End {
		return Batch{Step: b.Step, End: true, Generation: b.Generation}, nil
	}
	out := Batch{Step: b.Step, Slot: b.Slot, Lines: b.Lines, Segments: b.Segments, MaxSeqlen: b.MaxSeqlen,
		Generation: b.Generation}
	if f.ss.transport.of().inMessages {
		// The slot is held until the consumer releases it: no copy is
		// needed. With metadata the whole slot goes (its arrays lie where
		// the layout says), else the lines' tokens alone.
		slot := f.ss.ring.Slot(b.Slot)
		cfg := f.ss.corpus.Config()
		if len(cfg.Metadata) == 0 {
			slot = slot[:b.Lines*cfg.LineTokens()*tokenBytes]
		}
		out.Data = slot
	}
	return out, nil
}

// Release gives slot back after step; waitNs is how long the consumer
// waited for that batch (0: not measured).
func (f *Feed) Release(slot int, step, waitNs uint64) error {
	cost := f.ss.pipeline.Cost(step, step)
	if err := f.ss.pipeline.Release(f.c, slot, step); err != nil {
		f.ss.log.Warn("bad release", zap.Int("consumer", f.c), zap.Error(err))
		return err
	}
	f.ss.touch()
	if waitNs > 0 {
		f.m.metrics.clientWait.observe(waitNs)
		f.ss.waits.waited(step, step, waitNs, cost)
	}
	return nil
}

// Watch serves a consumer that reads the ring's control block: it applies
// the releases the consumer writes there until the producer stops, and
// returns the rank's last step, or the production error.
//
// It sleeps on the release futex, and is woken by every event that needs
// it: a consumer's release while the producer waits for a slot (the
// consumer sees the producer's waiting flag and wakes it), the producer
// starting to wait (so releases made before it are seen), the producer
// stopping, ctx ending, the session closing. One wake-up can be lost: a
// consumer's release store and its look at the waiting flag are not
// ordered (see the client's _control.py), so a release made just as the
// producer starts to wait may be seen by neither side at first. So each
// time the producer began to wait, the watcher looks again a few times,
// quickly, while it still waits. Otherwise it sleeps up to watchPoll: at a
// trainer's pace the producer waits for a slot most of the time, and each
// release costs a few wake-ups, not one every few hundred microseconds.
func (f *Feed) Watch(ctx context.Context) (last uint64, err error) {
	// The control block is in a file the client can truncate: a fault
	// reading it ends this stream, and so the session, with an error naming
	// the file.
	err = mapped.Guard(func() error {
		var werr error
		last, werr = f.watch(ctx)
		return werr
	})
	return last, err
}

func (f *Feed) watch(ctx context.Context) (uint64, error) {
	ss, ctl := f.ss, f.ss.ctl
	stop := context.AfterFunc(ctx, ctl.WakeReleaseWatchers)
	defer stop()
	ended := make(chan struct{})
	var last uint64
	var endErr error
	go func() {
		last, endErr = ss.pipeline.Wait(ctx)
		close(ended)
		ctl.WakeReleaseWatchers()
	}()
	var applied, waits uint64
	// waitedNs is the consumer's wait sum in the block at the last release
	// applied: what it grew by since is the wait for the steps released.
	_, _, waitedNs := ctl.WaitStats(f.c)
	quick, backoff := 0, minWatchPoll
	for {
		seq := ctl.ReleaseSeq()
		if w := ctl.ProducerWaits(); w != waits {
			// The producer began to wait since the last look: look again soon.
			waits, quick, backoff = w, quickPolls, minWatchPoll
		}
		if r := ctl.Released(f.c); r > applied {
			cost := ss.pipeline.Cost(applied+1, r)
			if err := ss.pipeline.ReleaseThrough(f.c, r); err != nil {
				ss.log.Warn("bad release", zap.Int("consumer", f.c), zap.Error(err))
				return 0, err
			}
			if _, _, sum := ctl.WaitStats(f.c); sum > waitedNs {
				ss.waits.waited(applied+1, r, sum-waitedNs, cost)
				waitedNs = sum
			}
			applied = r
			ss.touch()
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-ended:
			return last, f.why(endErr)
		default:
		}
		timeout := watchPoll
		if quick > 0 && ctl.ProducerWaiting() {
			timeout, backoff, quick = backoff, 2*backoff, quick-1
		}
		ctl.WaitRelease(seq, timeout)
	}
}

// why is err, or for a pipeline closed because the session was dropped
// while this consumer streamed (not by the daemon's stop), the reason it
// was dropped: "pipeline closed" would read as the daemon being gone.
func (f *Feed) why(err error) error {
	if errors.Is(err, stream.ErrClosed) && !f.m.isStopping() {
		if gone := f.ss.goneErr(); gone != nil {
			return gone
		}
	}
	return err
}

// watchPoll is the longest a release watcher sleeps: every event it must
// act on wakes it, so this only bounds the harm of a wake-up missed some way
// not foreseen. After the producer began to wait, the watcher looks again
// quickPolls times while it waits, from minWatchPoll and doubling, to catch
// the release whose wake-up was lost.
const (
	watchPoll    = 100 * time.Millisecond
	minWatchPoll = 50 * time.Microsecond
	quickPolls   = 2
)

// Detach ends the consumer's stream, and reports whether that end was
// expected: the consumer closed the session first (at the end of its
// iteration, or before it), or the daemon is stopping. Whatever error ended
// such a stream is no failure. A consumer whose stream ends without having
// closed the session has gone away (died, or cancelled): its session and
// ring are reclaimed, for every consumer of it; but with KeepDetached, when
// its process died, the session is kept for a new process to take its
// place (keep.go).
func (f *Feed) Detach(cause error) (expected bool) {
	defer f.unfollow()
	f.ss.mu.Lock()
	closed := f.ss.closed[f.c]
	f.ss.mu.Unlock()
	stopping := f.m.isStopping()
	if !closed && (stopping || !f.leave(cause)) {
		f.m.drop(f.ss, fmt.Sprintf("reclaimed: consumer %d's batch stream ended without close (%v)", f.c, cause))
	}
	return closed || stopping
}

// Follow tells the feed its consumer's process, by pid as the socket's
// peer credentials give it (0: not known), for Detach to tell a process
// that died from one that ended its stream and lives on.
func (f *Feed) Follow(pid int32) {
	if f.m.cfg.KeepDetached > 0 {
		f.life = followProcess(pid)
		f.ss.mu.Lock()
		f.ss.procs[f.c].close() // the opener's (keep.go), if any
		f.ss.procs[f.c] = f.life
		f.ss.mu.Unlock()
	}
}

// unfollow lets go of the consumer's process, once the session no longer
// looks at it (exited).
func (f *Feed) unfollow() {
	if f.life == nil {
		return
	}
	f.ss.mu.Lock()
	if f.ss.procs[f.c] == f.life {
		f.ss.procs[f.c] = nil
	}
	f.ss.mu.Unlock()
	f.life.close()
}
