package cudatest

import (
	"fmt"

	"github.com/dataloaderd/dataloaderd/internal/cuda"
)

// StreamCreate implements cuda.Driver.
func (f *Driver) StreamCreate(ctx cuda.Context) (cuda.Stream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.device("cuStreamCreate", ctx)
	if err != nil {
		return 0, err
	}
	s := cuda.Stream(f.handle())
	f.streams[s] = &fakeStream{dev: d}
	return s, nil
}

// StreamDestroy implements cuda.Driver: queued work still completes, as on a GPU.
func (f *Driver) StreamDestroy(ctx cuda.Context, s cuda.Stream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.device("cuStreamDestroy_v2", ctx); err != nil {
		return err
	}
	st := f.streams[s]
	if st == nil {
		return f.err("cuStreamDestroy_v2", cuda.ErrInvalidHandle)
	}
	st.run(len(st.ops))
	delete(f.streams, s)
	return nil
}

func (s *fakeStream) run(upTo int) {
	for ; s.done < upTo; s.done++ {
		s.ops[s.done]()
		s.ops[s.done] = nil
	}
}

// EventCreate implements cuda.Driver.
func (f *Driver) EventCreate(ctx cuda.Context) (cuda.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.device("cuEventCreate", ctx)
	if err != nil {
		return 0, err
	}
	e := cuda.Event(f.handle())
	f.events[e] = &fakeEvent{dev: d}
	return e, nil
}

// EventDestroy implements cuda.Driver.
func (f *Driver) EventDestroy(ctx cuda.Context, e cuda.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.device("cuEventDestroy_v2", ctx); err != nil {
		return err
	}
	if f.events[e] == nil {
		return f.err("cuEventDestroy_v2", cuda.ErrInvalidHandle)
	}
	delete(f.events, e)
	return nil
}

// MemcpyHtoDAsync implements cuda.Driver: the copy runs when an event recorded
// after it is waited for, reading src at that moment as DMA would.
func (f *Driver) MemcpyHtoDAsync(ctx cuda.Context, dst cuda.DevicePtr, src []byte, s cuda.Stream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.device("cuMemcpyHtoDAsync_v2", ctx); err != nil {
		return err
	}
	st := f.streams[s]
	if st == nil {
		return f.err("cuMemcpyHtoDAsync_v2", cuda.ErrInvalidHandle)
	}
	a, off := f.find(dst, len(src))
	if a == nil {
		return &cuda.Error{Call: "cuMemcpyHtoDAsync_v2", Result: cuda.ErrInvalidValue, Name: cuda.ErrInvalidValue.Name(),
			Desc: fmt.Sprintf("%d bytes at %#x are not inside one allocation", len(src), uint64(dst))}
	}
	if !f.pinned(src) {
		f.pageable++
	}
	f.copyBytes += uint64(len(src))
	to := a.mem[off : off+len(src)]
	st.ops = append(st.ops, func() { copy(to, src) })
	return nil
}

// EventRecord implements cuda.Driver.
func (f *Driver) EventRecord(ctx cuda.Context, e cuda.Event, s cuda.Stream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.device("cuEventRecord", ctx); err != nil {
		return err
	}
	ev, st := f.events[e], f.streams[s]
	if ev == nil || st == nil {
		return f.err("cuEventRecord", cuda.ErrInvalidHandle)
	}
	ev.stream, ev.upTo, ev.queries = st, len(st.ops), 0
	return nil
}

// EventSynchronize implements cuda.Driver.
func (f *Driver) EventSynchronize(ctx cuda.Context, e cuda.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.device("cuEventSynchronize", ctx); err != nil {
		return err
	}
	f.syncs++
	ev := f.events[e]
	if ev == nil {
		return f.err("cuEventSynchronize", cuda.ErrInvalidHandle)
	}
	if ev.stream != nil {
		ev.stream.run(ev.upTo)
	}
	return nil
}

// SetPendingQueries makes every event recorded from now on answer n queries
// with "not yet" before it completes, as a copy still in flight would.
func (f *Driver) SetPendingQueries(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pending = n
}

// EventQuery implements cuda.Driver: a fake event completes when first asked,
// or after SetPendingQueries' count of queries.
func (f *Driver) EventQuery(ctx cuda.Context, e cuda.Event) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.device("cuEventQuery", ctx); err != nil {
		return false, err
	}
	ev := f.events[e]
	if ev == nil {
		return false, f.err("cuEventQuery", cuda.ErrInvalidHandle)
	}
	if ev.queries++; ev.queries <= f.pending {
		return false, nil
	}
	if ev.stream != nil {
		ev.stream.run(ev.upTo)
	}
	return true, nil
}
