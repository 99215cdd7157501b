// Package cudatest is a CUDA driver without a GPU, for the tests of the
// packages that use device rings; no binary links it.
package cudatest

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/dataloaderd/dataloaderd/internal/cuda"
)

// Driver is a cuda.Driver without a GPU, for tests of this package and of
// the packages that use device rings. Device memory is host memory, copies
// are queued on their stream and run when an event recorded after them is
// synchronized or queried (so code that announces a slot before waiting
// reads stale bytes, as it would on a GPU), IPC handles are opaque bytes that
// map back to the allocation, and every failure can be injected by the name
// of the CUDA call it stands for.
type Driver struct {
	id uint64

	mu        sync.Mutex
	names     []string
	total     uint64
	next      uintptr // next handle or device address
	ctxRefs   []int
	retains   int
	dev       map[cuda.DevicePtr]*fakeAlloc
	host      map[*byte]int
	streams   map[cuda.Stream]*fakeStream
	events    map[cuda.Event]*fakeEvent
	fail      map[string]fakeFailure
	pageable  int
	copyBytes uint64
	pending   int // queries each recorded event answers "not yet" before it completes
	syncs     int
}

type fakeAlloc struct {
	dev int
	mem []byte
}

type fakeStream struct {
	dev  int
	ops  []func()
	done int // ops[:done] have run
}

type fakeEvent struct {
	dev     int
	stream  *fakeStream
	upTo    int // the stream's op count when recorded
	queries int // since it was recorded
}

type fakeFailure struct {
	skip   int // calls that still succeed first
	result cuda.Result
}

// Counts is what a Driver holds at one moment; after every ring is
// closed, all of it but PrimaryRetains, PageableCopies and CopiedBytes is zero.
type Counts struct {
	DeviceAllocs, DeviceBytes int
	HostAllocs, HostBytes     int
	Streams, Events           int
	// Contexts is the number of primary-context references held.
	Contexts int
	// PrimaryRetains counts cuDevicePrimaryCtxRetain calls ever made.
	PrimaryRetains int
	// PageableCopies counts host-to-device copies from memory that HostAlloc
	// did not return (slow, synchronous staging on a real GPU).
	PageableCopies int
	// CopiedBytes counts host-to-device bytes copied.
	CopiedBytes uint64
	// Syncs counts cuEventSynchronize calls ever made.
	Syncs int
}

// DeviceBytes is the memory of each fake GPU.
const DeviceBytes = 80 << 30

var driverIDs atomic.Uint64

// NewDriver returns a driver with two fake GPUs.
func NewDriver() *Driver {
	return &Driver{
		id:      driverIDs.Add(1),
		names:   []string{"Fake GPU 0", "Fake GPU 1"},
		total:   DeviceBytes,
		next:    0x7f0000000000,
		ctxRefs: make([]int, 2),
		dev:     map[cuda.DevicePtr]*fakeAlloc{},
		host:    map[*byte]int{},
		streams: map[cuda.Stream]*fakeStream{},
		events:  map[cuda.Event]*fakeEvent{},
		fail:    map[string]fakeFailure{},
	}
}

// FailNext makes the next call of the named CUDA function (e.g.
// "cuMemAlloc_v2") fail with r.
func (f *Driver) FailNext(call string, r cuda.Result) { f.FailAfter(call, 0, r) }

// FailAfter lets n calls of the named function succeed, then fails one with r.
func (f *Driver) FailAfter(call string, n int, r cuda.Result) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[call] = fakeFailure{skip: n, result: r}
}

// Counts reports what the driver holds now.
func (f *Driver) Counts() Counts {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := Counts{DeviceAllocs: len(f.dev), HostAllocs: len(f.host), Streams: len(f.streams), Events: len(f.events),
		PrimaryRetains: f.retains, PageableCopies: f.pageable, CopiedBytes: f.copyBytes, Syncs: f.syncs}
	for _, a := range f.dev {
		c.DeviceBytes += len(a.mem)
	}
	for _, n := range f.host {
		c.HostBytes += n
	}
	for _, n := range f.ctxRefs {
		c.Contexts += n
	}
	return c
}

// DeviceMemory returns the n bytes of device memory at p, as the GPU would
// see them; nil when they are not inside one allocation.
func (f *Driver) DeviceMemory(p cuda.DevicePtr, n int) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, off := f.find(p, n)
	if a == nil {
		return nil
	}
	return a.mem[off : off+n : off+n]
}

// OpenIPC maps an IPC handle back to its allocation, as cuIpcOpenMemHandle
// does in another process: it returns the whole allocation's memory.
func (f *Driver) OpenIPC(h []byte) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(h) != cuda.IPCHandleSize || string(h[:8]) != "fakeipc\x00" || binary.LittleEndian.Uint64(h[8:]) != f.id {
		return nil, f.err("cuIpcOpenMemHandle", cuda.ErrInvalidValue)
	}
	a := f.dev[cuda.DevicePtr(binary.LittleEndian.Uint64(h[16:]))]
	if a == nil || uint64(len(a.mem)) != binary.LittleEndian.Uint64(h[24:]) {
		return nil, f.err("cuIpcOpenMemHandle", cuda.ErrInvalidHandle)
	}
	return a.mem, nil
}

// ReadIPC copies n bytes at off of memory OpenIPC returned, under the
// driver's lock, as a synchronous device-to-host copy would: a reader that
// learnt of the bytes through shared memory (a control block) rather than
// through the driver then sees them ordered after the copy that wrote them,
// for the race detector too.
func (f *Driver) ReadIPC(mem []byte, off, n int) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]byte(nil), mem[off:off+n]...)
}

func (f *Driver) err(call string, r cuda.Result) error {
	return &cuda.Error{Call: call, Result: r, Name: r.Name(), Desc: "injected by the fake driver"}
}

// enter is called with f.mu held at the start of every call: it returns the
// injected failure, if this call is the one to fail.
func (f *Driver) enter(call string) error {
	fl, ok := f.fail[call]
	if !ok {
		return nil
	}
	if fl.skip > 0 {
		fl.skip--
		f.fail[call] = fl
		return nil
	}
	delete(f.fail, call)
	return f.err(call, fl.result)
}

// device checks ctx, which is a retained device's index + 1.
func (f *Driver) device(call string, ctx cuda.Context) (int, error) {
	if err := f.enter(call); err != nil {
		return 0, err
	}
	d := int(ctx) - 1
	if d < 0 || d >= len(f.ctxRefs) || f.ctxRefs[d] == 0 {
		return 0, &cuda.Error{Call: call, Result: cuda.ErrInvalidContext, Name: cuda.ErrInvalidContext.Name()}
	}
	return d, nil
}

func (f *Driver) handle() uintptr {
	f.next += 512
	return f.next
}

func (f *Driver) find(p cuda.DevicePtr, n int) (*fakeAlloc, int) {
	for base, a := range f.dev {
		if p >= base && uint64(p-base)+uint64(n) <= uint64(len(a.mem)) {
			return a, int(p - base)
		}
	}
	return nil, 0
}

// Version implements cuda.Driver.
func (f *Driver) Version() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return 12040, f.enter("cuDriverGetVersion")
}

// DeviceCount implements cuda.Driver.
func (f *Driver) DeviceCount() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.names), f.enter("cuDeviceGetCount")
}

// DeviceName implements cuda.Driver.
func (f *Driver) DeviceName(dev int) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("cuDeviceGetName"); err != nil {
		return "", err
	}
	if dev < 0 || dev >= len(f.names) {
		return "", f.err("cuDeviceGet", cuda.ErrInvalidDevice)
	}
	return f.names[dev], nil
}

// RetainPrimaryContext implements cuda.Driver.
func (f *Driver) RetainPrimaryContext(dev int) (cuda.Context, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("cuDeviceGet"); err != nil {
		return 0, err
	}
	if dev < 0 || dev >= len(f.names) {
		return 0, &cuda.Error{Call: "cuDeviceGet", Result: cuda.ErrInvalidDevice, Name: cuda.ErrInvalidDevice.Name()}
	}
	if err := f.enter("cuDevicePrimaryCtxRetain"); err != nil {
		return 0, err
	}
	f.ctxRefs[dev]++
	f.retains++
	return cuda.Context(dev + 1), nil
}

// ReleasePrimaryContext implements cuda.Driver.
func (f *Driver) ReleasePrimaryContext(dev int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("cuDevicePrimaryCtxRelease_v2"); err != nil {
		return err
	}
	if dev < 0 || dev >= len(f.names) || f.ctxRefs[dev] == 0 {
		return f.err("cuDevicePrimaryCtxRelease_v2", cuda.ErrInvalidContext)
	}
	f.ctxRefs[dev]--
	return nil
}

// MemGetInfo implements cuda.Driver.
func (f *Driver) MemGetInfo(ctx cuda.Context) (uint64, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.device("cuMemGetInfo_v2", ctx)
	if err != nil {
		return 0, 0, err
	}
	return f.total - f.used(d), f.total, nil
}

func (f *Driver) used(dev int) uint64 {
	var n uint64
	for _, a := range f.dev {
		if a.dev == dev {
			n += uint64(len(a.mem))
		}
	}
	return n
}

// MemAlloc implements cuda.Driver.
func (f *Driver) MemAlloc(ctx cuda.Context, n int) (cuda.DevicePtr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.device("cuMemAlloc_v2", ctx)
	if err != nil {
		return 0, err
	}
	if n <= 0 {
		return 0, f.err("cuMemAlloc_v2", cuda.ErrInvalidValue)
	}
	if uint64(n) > f.total-f.used(d) {
		return 0, &cuda.Error{Call: "cuMemAlloc_v2", Result: cuda.ErrOutOfMemory, Name: cuda.ErrOutOfMemory.Name(), Desc: "out of memory"}
	}
	p := cuda.DevicePtr(f.next + 512)
	f.next += uintptr(n+1023) &^ 511 // keep allocations apart and 512-aligned
	f.dev[p] = &fakeAlloc{dev: d, mem: make([]byte, n)}
	return p, nil
}

// MemFree implements cuda.Driver.
func (f *Driver) MemFree(ctx cuda.Context, p cuda.DevicePtr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.device("cuMemFree_v2", ctx); err != nil {
		return err
	}
	if f.dev[p] == nil {
		return f.err("cuMemFree_v2", cuda.ErrInvalidValue)
	}
	delete(f.dev, p)
	return nil
}

// IPCGetMemHandle implements cuda.Driver.
func (f *Driver) IPCGetMemHandle(ctx cuda.Context, p cuda.DevicePtr) (cuda.IPCMemHandle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var h cuda.IPCMemHandle
	if _, err := f.device("cuIpcGetMemHandle", ctx); err != nil {
		return h, err
	}
	a := f.dev[p]
	if a == nil {
		return h, f.err("cuIpcGetMemHandle", cuda.ErrInvalidValue)
	}
	copy(h[:], "fakeipc\x00")
	binary.LittleEndian.PutUint64(h[8:], f.id)
	binary.LittleEndian.PutUint64(h[16:], uint64(p))
	binary.LittleEndian.PutUint64(h[24:], uint64(len(a.mem)))
	return h, nil
}

// HostAlloc implements cuda.Driver.
func (f *Driver) HostAlloc(ctx cuda.Context, n int) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.device("cuMemHostAlloc", ctx); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, f.err("cuMemHostAlloc", cuda.ErrInvalidValue)
	}
	b := make([]byte, n)
	f.host[unsafe.SliceData(b)] = n
	return b, nil
}

// HostFree implements cuda.Driver.
func (f *Driver) HostFree(ctx cuda.Context, b []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.device("cuMemFreeHost", ctx); err != nil {
		return err
	}
	if _, ok := f.host[unsafe.SliceData(b)]; !ok || len(b) == 0 {
		return f.err("cuMemFreeHost", cuda.ErrInvalidValue)
	}
	delete(f.host, unsafe.SliceData(b))
	return nil
}

// pinned reports whether src lies inside one HostAlloc allocation.
func (f *Driver) pinned(src []byte) bool {
	if len(src) == 0 {
		return true
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(src)))
	for base, n := range f.host {
		b := uintptr(unsafe.Pointer(base))
		if p >= b && p+uintptr(len(src)) <= b+uintptr(n) {
			return true
		}
	}
	return false
}
