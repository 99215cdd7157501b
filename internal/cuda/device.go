package cuda

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Committer is a ring whose slots reach their readers only when committed.
// After writing batch bytes into Slot(i), the producer calls Commit(i) and
// announces slot i only once it returns nil. A ring without Commit (shm,
// memory) is readable as soon as it is written. Commit(i) on a DeviceRing
// copies the whole slot, so any bytes past the batch are stale, as they are
// in the other rings.
type Committer interface {
	Commit(i int) error
}

// ErrRingClosed is returned by Commit after Close.
var ErrRingClosed = errors.New("ring is closed")

// ErrNoSuchDevice marks a GPU index that the driver does not see.
var ErrNoSuchDevice = errors.New("no such GPU")

// Devices makes device rings on the GPUs of one driver. A CUDA context costs
// hundreds of MiB of GPU memory and a few hundred ms to create, so every ring
// on a GPU shares its primary context (the one PyTorch uses in the trainer
// processes too): it is retained for the first ring on the GPU and released
// when the last one closes. Make one Devices per process.
type Devices struct {
	drv Driver

	mu  sync.Mutex
	ctx map[int]*primary
}

type primary struct {
	ctx   Context
	rings int
}

// NewDevices returns a Devices over drv.
func NewDevices(drv Driver) *Devices {
	return &Devices{drv: drv, ctx: map[int]*primary{}}
}

// Driver is the driver the rings use.
func (d *Devices) Driver() Driver { return d.drv }

// Contexts is the number of GPUs whose primary context is retained.
func (d *Devices) Contexts() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.ctx)
}

func (d *Devices) acquire(dev int) (Context, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p := d.ctx[dev]; p != nil {
		p.rings++
		return p.ctx, nil
	}
	n, err := d.drv.DeviceCount()
	if err != nil {
		return 0, err
	}
	if dev < 0 || dev >= n {
		return 0, fmt.Errorf("%w: GPU %d asked for, the driver sees %d (CUDA_VISIBLE_DEVICES applies)", ErrNoSuchDevice, dev, n)
	}
	ctx, err := d.drv.RetainPrimaryContext(dev)
	if err != nil {
		return 0, err
	}
	d.ctx[dev] = &primary{ctx: ctx, rings: 1}
	return ctx, nil
}

func (d *Devices) release(dev int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.ctx[dev]
	if p == nil {
		return nil
	}
	if p.rings--; p.rings > 0 {
		return nil
	}
	delete(d.ctx, dev)
	return d.drv.ReleasePrimaryContext(dev)
}

// DeviceRing is a ring of slots in one GPU allocation, exported to the
// trainer processes by CUDA IPC, with a pinned host staging slot for each
// device slot. The producer writes a batch into Slot(i) (host memory), then
// Commit(i) copies it to the GPU; clients read device slot i at offset
// i*Stride() of the allocation that IPCHandle opens.
//
// GPU memory per ring: DeviceBytes() of device memory plus DeviceBytes() of
// pinned host memory (StagingBytes), and a share of the GPU's primary context.
type DeviceRing struct {
	devs      *Devices
	dev       int
	ctx       Context
	slots     int
	slotBytes int
	stride    int

	mem     DevicePtr
	handle  IPCMemHandle
	staging []byte
	stream  Stream
	events  []Event

	mu     sync.Mutex // serializes Commit and Close
	closed bool

	commits   atomic.Uint64
	copied    atomic.Uint64
	commitDur atomic.Int64
	onCommit  func(took time.Duration)
}

// OnCommit sets a function called with the duration of every successful
// Commit (copy and wait), for metrics. Set it before the first Commit.
func (r *DeviceRing) OnCommit(f func(took time.Duration)) { r.onCommit = f }

// NewRing allocates a ring of slots of slotBytes on GPU device. On failure
// nothing stays allocated, and the error names the CUDA call and its result.
func (d *Devices) NewRing(device, slots, slotBytes int) (_ *DeviceRing, err error) {
	if err := checkGeometry(slots, slotBytes); err != nil {
		return nil, err
	}
	st := stride(slotBytes)
	r := &DeviceRing{devs: d, dev: device, slots: slots, slotBytes: slotBytes, stride: st}
	if r.ctx, err = d.acquire(device); err != nil {
		return nil, fmt.Errorf("device ring on GPU %d: %w", device, err)
	}
	defer func() {
		if err != nil {
			r.free() // the first error is the one worth reporting
			err = fmt.Errorf("device ring of %d slots of %d bytes on GPU %d: %w", slots, slotBytes, device, err)
		}
	}()
	drv := d.drv
	if r.mem, err = drv.MemAlloc(r.ctx, slots*st); err != nil {
		return nil, err
	}
	if r.handle, err = drv.IPCGetMemHandle(r.ctx, r.mem); err != nil {
		return nil, err
	}
	if r.staging, err = drv.HostAlloc(r.ctx, slots*st); err != nil {
		return nil, err
	}
	if r.stream, err = drv.StreamCreate(r.ctx); err != nil {
		return nil, err
	}
	for range slots {
		e, err := drv.EventCreate(r.ctx)
		if err != nil {
			return nil, err
		}
		r.events = append(r.events, e)
	}
	return r, nil
}

// Slots implements Ring.
func (r *DeviceRing) Slots() int { return r.slots }

// Slot implements Ring: slot i's pinned host staging memory, which the
// producer writes and Commit copies to the GPU.
func (r *DeviceRing) Slot(i int) []byte {
	return r.staging[i*r.stride : i*r.stride+r.slotBytes : i*r.stride+r.slotBytes]
}

// SlotBytes implements Ring.
func (r *DeviceRing) SlotBytes() int { return r.slotBytes }

// Stride implements Ring: also the distance between device slots.
func (r *DeviceRing) Stride() int { return r.stride }

// Path implements Ring: a device ring has no file; clients open IPCHandle.
func (r *DeviceRing) Path() string { return "" }

// Device is the GPU index the ring lives on.
func (r *DeviceRing) Device() int { return r.dev }

// IPCHandle is the 64-byte cudaIpcMemHandle of the allocation holding every
// slot: a client opens it once (cuIpcOpenMemHandle) and reads slot i at
// offset i*Stride().
func (r *DeviceRing) IPCHandle() []byte {
	h := r.handle
	return h[:]
}

// DeviceBytes is the GPU memory the ring's allocation takes.
func (r *DeviceRing) DeviceBytes() int { return r.slots * r.stride }

// StagingBytes is the pinned host memory the ring takes.
func (r *DeviceRing) StagingBytes() int { return len(r.staging) }

// MemInfo is the free and total memory of the ring's GPU, as the driver
// reports it (every process's use counts).
func (r *DeviceRing) MemInfo() (free, total uint64, err error) {
	return r.devs.drv.MemGetInfo(r.ctx)
}

// Commit copies slot i from staging to the GPU on the ring's stream and
// returns once the copy is complete, so that a slot announced after Commit
// holds the batch in device memory. The staging slot may be written again
// as soon as Commit returns.
func (r *DeviceRing) Commit(i int) error {
	if i < 0 || i >= r.slots {
		return fmt.Errorf("commit slot %d of a %d-slot ring", i, r.slots)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrRingClosed
	}
	start := time.Now()
	drv, dst := r.devs.drv, r.mem+DevicePtr(i*r.stride)
	err := drv.MemcpyHtoDAsync(r.ctx, dst, r.Slot(i), r.stream)
	if err == nil {
		err = drv.EventRecord(r.ctx, r.events[i], r.stream)
	}
	if err == nil {
		err = r.await(r.events[i])
	}
	if err != nil {
		return fmt.Errorf("commit slot %d to GPU %d: %w", i, r.dev, err)
	}
	r.commits.Add(1)
	r.copied.Add(uint64(r.slotBytes))
	took := time.Since(start)
	r.commitDur.Add(int64(took))
	if r.onCommit != nil {
		r.onCommit(took)
	}
	return nil
}

// await returns once e has completed. It polls the event for as long as the
// copy of a slot should take at a slow 5 GB/s (plus 100 us), then sleeps on
// it. A sleeping wait is woken by an interrupt: on an H100 (in a VM) 1 MiB
// commits that slept took 240 us on average, over 1% of them over 640 us,
// against 65 us and 99% under 160 us polling (dataloaderd_device_copy_seconds,
// docs/benchmarks.md). A copy held up by a busy link costs no more CPU than
// the budget.
func (r *DeviceRing) await(e Event) error {
	drv := r.devs.drv
	deadline := time.Now().Add(spinBudget(r.slotBytes))
	for {
		done, err := drv.EventQuery(r.ctx, e)
		if err != nil || done {
			return err
		}
		if time.Now().After(deadline) {
			return drv.EventSynchronize(r.ctx, e)
		}
	}
}

// spinBudget is how long await polls before it sleeps, for a copy of n bytes.
func spinBudget(n int) time.Duration {
	const slowBytesPerSecond = 5e9
	return 100*time.Microsecond + time.Duration(float64(n)/slowBytesPerSecond*float64(time.Second))
}

// CommitStats is how many commits the ring made, the bytes they copied and
// the time they took in all (copy and wait), for the host-to-device rate.
func (r *DeviceRing) CommitStats() (commits, bytes uint64, took time.Duration) {
	return r.commits.Load(), r.copied.Load(), time.Duration(r.commitDur.Load())
}

// Close waits for copies in flight and frees everything the ring holds: its
// events, stream, pinned staging, device memory and its reference to the
// GPU's context. Closing twice is harmless. Clients that still have the IPC
// handle open should close it; the memory is theirs to unmap.
func (r *DeviceRing) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	return r.free()
}

// free releases whatever of the ring was made, in reverse order, and
// returns the first error.
func (r *DeviceRing) free() error {
	drv := r.devs.drv
	var errs []error
	if r.stream != 0 && len(r.events) > 0 {
		// Nothing is in flight after a successful Commit; after a failed one
		// a copy may still read staging, so wait for the stream to drain.
		if err := drv.EventRecord(r.ctx, r.events[0], r.stream); err == nil {
			errs = append(errs, drv.EventSynchronize(r.ctx, r.events[0]))
		}
	}
	for _, e := range r.events {
		errs = append(errs, drv.EventDestroy(r.ctx, e))
	}
	r.events = nil
	if r.stream != 0 {
		errs = append(errs, drv.StreamDestroy(r.ctx, r.stream))
		r.stream = 0
	}
	if r.staging != nil {
		errs = append(errs, drv.HostFree(r.ctx, r.staging))
		r.staging = nil
	}
	if r.mem != 0 {
		errs = append(errs, drv.MemFree(r.ctx, r.mem))
		r.mem = 0
	}
	if r.ctx != 0 {
		errs = append(errs, r.devs.release(r.dev))
		r.ctx = 0
	}
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("close device ring on GPU %d: %w", r.dev, err)
		}
	}
	return nil
}

var (
	_ Ring      = (*DeviceRing)(nil)
	_ Committer = (*DeviceRing)(nil)
	_ Driver    = (*FakeDriver)(nil)
	_ Driver    = (*libcuda)(nil)
)
