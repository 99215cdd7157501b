package cuda

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/errkind"
)

// ErrRingClosed is returned by Commit after Close.
var ErrRingClosed = errkind.New(errkind.NotFound, "ring is closed")

// ErrNoSuchDevice marks a GPU index that the driver does not see.
var ErrNoSuchDevice = errkind.New(errkind.Invalid, "no such GPU")

// DeviceRing is a ring of slots in GPU memory, exported to the trainer
// processes by CUDA IPC, with a pinned host staging slot for each slot. The
// producer writes a batch into Slot(i) (host memory), then Commit(i) copies it
// to the GPU; clients read device slot i at offset i*Stride() of the
// allocation that IPCHandle opens.
//
// A ring starts on one GPU. The consumers of a tensor-parallel group sit on
// different GPUs of the node: AddDevice gives the ring one more allocation
// on another GPU, and Commit then copies every batch to each of them, so each
// consumer reads its batches from memory on its own GPU.
//
// GPU memory: SlotsBytes() on each of its GPUs (DeviceBytes() in all), the
// same again of pinned host memory (StagingBytes), and a share of each GPU's
// primary context.
type DeviceRing struct {
	devs      *Devices
	first     int // the GPU it was made on
	slots     int
	slotBytes int
	stride    int
	onCommit  func(took time.Duration)
	onBytes   func(delta int)

	mu      sync.Mutex // serializes Slot, Commit, AddDevice and Close
	closed  bool
	staging []byte
	gpus    []*gpuSlots // gpus[0] is the GPU the ring was made on
	// writing is the slot the producer writes now (Slot was called for it,
	// Commit not yet), -1 when none: AddDevice copies every other one, and
	// Commit brings that one to the new GPU too.
	writing int

	commits   atomic.Uint64
	copied    atomic.Uint64
	commitDur atomic.Int64
}

// gpuSlots is a ring's allocation on one GPU, with the stream and events of
// the copies into it.
type gpuSlots struct {
	dev    int
	ctx    Context
	mem    DevicePtr
	handle IPCMemHandle
	stream Stream
	events []Event
}

// OnCommit sets a function called with the duration of every successful
// Commit (copy and wait), for metrics. Set it before the first Commit.
func (r *DeviceRing) OnCommit(f func(took time.Duration)) { r.onCommit = f }

// OnDeviceBytes sets a function called with the change of DeviceBytes when
// AddDevice allocates on another GPU (positive) and when Close frees the
// ring (negative), under the ring's lock, for metrics. Set it right after
// NewRing; the first GPU's bytes are the caller's to count.
func (r *DeviceRing) OnDeviceBytes(f func(delta int)) { r.onBytes = f }

// NewRing allocates a ring of slots of slotBytes on GPU device. On failure
// nothing stays allocated, and the error names the CUDA call and its result.
func (d *Devices) NewRing(device, slots, slotBytes int) (_ *DeviceRing, err error) {
	if err := checkGeometry(slots, slotBytes); err != nil {
		return nil, err
	}
	r := &DeviceRing{devs: d, first: device, slots: slots, slotBytes: slotBytes, stride: pageStride(slotBytes), writing: -1}
	defer func() {
		if err != nil {
			r.free() // the first error is the one worth reporting
			err = fmt.Errorf("device ring of %d slots of %d bytes on GPU %d: %w", slots, slotBytes, device, err)
		}
	}()
	g, err := r.newGPU(device)
	if err != nil {
		return nil, err
	}
	r.gpus = append(r.gpus, g)
	// Pinned for every context (portable), so copies to other GPUs use it too.
	if r.staging, err = d.drv.HostAlloc(g.ctx, slots*r.stride); err != nil {
		return nil, err
	}
	return r, nil
}

// newGPU allocates the ring's slots, a stream and an event per slot on GPU
// device; on failure it frees what it made.
func (r *DeviceRing) newGPU(device int) (_ *gpuSlots, err error) {
	g := &gpuSlots{dev: device}
	if g.ctx, err = r.devs.acquire(device); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			if ferr := r.freeGPU(g); ferr != nil {
				err = errors.Join(err, ferr)
			}
		}
	}()
	drv := r.devs.drv
	if g.mem, err = drv.MemAlloc(g.ctx, r.slots*r.stride); err != nil {
		return nil, err
	}
	if g.handle, err = drv.IPCGetMemHandle(g.ctx, g.mem); err != nil {
		return nil, err
	}
	if g.stream, err = drv.StreamCreate(g.ctx); err != nil {
		return nil, err
	}
	for range r.slots {
		e, err := drv.EventCreate(g.ctx)
		if err != nil {
			return nil, err
		}
		g.events = append(g.events, e)
	}
	return g, nil
}

// AddDevice gives the ring slots on GPU device too (nothing if it has them)
// and copies every slot there, so the batches produced so far are on it as
// well; from then on Commit copies each batch to every GPU of the ring. It
// reports whether it allocated. On failure nothing of it stays allocated.
func (r *DeviceRing) AddDevice(device int) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false, ErrRingClosed
	}
	if r.gpu(device) != nil {
		return false, nil
	}
	g, err := r.newGPU(device)
	if err == nil {
		if err = r.copyStaged(g); err != nil {
			err = errors.Join(err, r.freeGPU(g))
		}
	}
	if err != nil {
		return false, fmt.Errorf("device ring of %d slots of %d bytes: adding GPU %d: %w", r.slots, r.slotBytes, device, err)
	}
	r.gpus = append(r.gpus, g)
	if r.onBytes != nil {
		r.onBytes(r.slots * r.stride)
	}
	return true, nil
}

// copyStaged copies to g every staged slot but the one the producer is
// writing (which its Commit copies there, g being in the ring by then), and
// waits for the copies; r.mu is held.
func (r *DeviceRing) copyStaged(g *gpuSlots) error {
	drv := r.devs.drv
	for i := range r.slots {
		if i == r.writing {
			continue
		}
		off := i * r.stride
		if err := drv.MemcpyHtoDAsync(g.ctx, g.mem+DevicePtr(off), r.staging[off:off+r.stride], g.stream); err != nil {
			return err
		}
	}
	if err := drv.EventRecord(g.ctx, g.events[0], g.stream); err != nil {
		return err
	}
	return r.await(g, g.events[0], len(r.staging))
}

func (r *DeviceRing) gpu(device int) *gpuSlots {
	for _, g := range r.gpus {
		if g.dev == device {
			return g
		}
	}
	return nil
}

// Slots is the number of slots.
func (r *DeviceRing) Slots() int { return r.slots }

// Slot is slot i's pinned host staging memory, which the producer writes and
// Commit copies to the GPU.
// Until Commit(i), slot i counts as being written.
func (r *DeviceRing) Slot(i int) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writing = i
	return r.staged(i)
}

// staged is slot i's staging memory.
func (r *DeviceRing) staged(i int) []byte {
	return r.staging[i*r.stride : i*r.stride+r.slotBytes : i*r.stride+r.slotBytes]
}

// SlotBytes is the size of a slot.
func (r *DeviceRing) SlotBytes() int { return r.slotBytes }

// Stride is the distance between the starts of two slots, in staging and on
// every GPU: a multiple of the page size.
func (r *DeviceRing) Stride() int { return r.stride }

// Device is the GPU index the ring was made on.
func (r *DeviceRing) Device() int { return r.first }

// Devices lists the GPUs the ring has slots on, the first one first.
func (r *DeviceRing) Devices() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]int, len(r.gpus))
	for i, g := range r.gpus {
		out[i] = g.dev
	}
	return out
}

// IPCHandle is the 64-byte cudaIpcMemHandle of the ring's allocation on GPU
// device (nil if it has none there): a client opens it once
// (cuIpcOpenMemHandle) and reads slot i at offset i*Stride().
func (r *DeviceRing) IPCHandle(device int) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.gpu(device)
	if g == nil {
		return nil
	}
	h := g.handle
	return h[:]
}

// SlotsBytes is the GPU memory the ring takes on each of its GPUs.
func (r *DeviceRing) SlotsBytes() int { return r.slots * r.stride }

// DeviceBytes is the GPU memory the ring takes on all its GPUs.
func (r *DeviceRing) DeviceBytes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.gpus) * r.slots * r.stride
}

// StagingBytes is the pinned host memory the ring takes.
func (r *DeviceRing) StagingBytes() int { return len(r.staging) }

// MemInfo is the free and total memory of the GPU the ring was made on, as
// the driver reports it (every process's use counts).
func (r *DeviceRing) MemInfo() (free, total uint64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, 0, ErrRingClosed
	}
	return r.devs.drv.MemGetInfo(r.gpus[0].ctx)
}

// Commit copies slot i from staging to each GPU of the ring, on the ring's
// stream there, and returns once every copy is complete, so that a slot
// announced after Commit holds the batch in device memory. The staging slot
// may be written again as soon as Commit returns. The producer announces a
// slot only once its Commit returned nil; Commit copies the whole slot, so
// bytes past a short batch are stale, as in the other rings.
func (r *DeviceRing) Commit(i int) error {
	if i < 0 || i >= r.slots {
		return fmt.Errorf("commit slot %d of a %d-slot ring", i, r.slots)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrRingClosed
	}
	if r.writing == i {
		r.writing = -1
	}
	start := time.Now()
	drv := r.devs.drv
	for _, g := range r.gpus {
		err := drv.MemcpyHtoDAsync(g.ctx, g.mem+DevicePtr(i*r.stride), r.staged(i), g.stream)
		if err == nil {
			err = drv.EventRecord(g.ctx, g.events[i], g.stream)
		}
		if err != nil {
			return fmt.Errorf("commit slot %d to GPU %d: %w", i, g.dev, err)
		}
	}
	for _, g := range r.gpus {
		if err := r.await(g, g.events[i], r.slotBytes); err != nil {
			return fmt.Errorf("commit slot %d to GPU %d: %w", i, g.dev, err)
		}
	}
	r.commits.Add(1)
	r.copied.Add(uint64(r.slotBytes * len(r.gpus)))
	took := time.Since(start)
	r.commitDur.Add(int64(took))
	if r.onCommit != nil {
		r.onCommit(took)
	}
	return nil
}

// await returns once e, recorded after a copy of n bytes to g, has
// completed. It polls the event for as long as the copy should take at a
// slow 5 GB/s (plus 100 us), then sleeps on it: a sleeping wait is woken by
// an interrupt, which made commits several times slower on the GPU measured
// (docs/benchmarks.md, "GPU delivery"). A copy held up by a busy link costs
// no more CPU than the budget.
func (r *DeviceRing) await(g *gpuSlots, e Event, n int) error {
	drv := r.devs.drv
	deadline := time.Now().Add(spinBudget(n))
	for {
		done, err := drv.EventQuery(g.ctx, e)
		if err != nil || done {
			return err
		}
		if time.Now().After(deadline) {
			return drv.EventSynchronize(g.ctx, e)
		}
	}
}

// spinBudget is how long await polls before it sleeps, for a copy of n bytes.
func spinBudget(n int) time.Duration {
	const slowBytesPerSecond = 5e9
	return 100*time.Microsecond + time.Duration(float64(n)/slowBytesPerSecond*float64(time.Second))
}

// CommitStats is how many commits the ring made, the bytes they copied (to
// every GPU) and the time they took in all (copy and wait).
func (r *DeviceRing) CommitStats() (commits, bytes uint64, took time.Duration) {
	return r.commits.Load(), r.copied.Load(), time.Duration(r.commitDur.Load())
}

var _ Driver = (*libcuda)(nil)
