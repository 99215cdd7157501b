package cuda

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"
)

// FakeDriver is a Driver without a GPU, for tests of this package and of
// the packages that use device rings. Device memory is host memory, copies
// are queued on their stream and run when an event recorded after them is
// synchronized or queried (so code that announces a slot before waiting
// reads stale bytes, as it would on a GPU), IPC handles are opaque bytes that
// map back to the allocation, and every failure can be injected by the name
// of the CUDA call it stands for.
type FakeDriver struct {
	id uint64

	mu        sync.Mutex
	names     []string
	total     uint64
	next      uintptr // next handle or device address
	ctxRefs   []int
	retains   int
	dev       map[DevicePtr]*fakeAlloc
	host      map[*byte]int
	streams   map[Stream]*fakeStream
	events    map[Event]*fakeEvent
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
	result Result
}

// FakeCounts is what a FakeDriver holds at one moment; after every ring is
// closed, all of it but PrimaryRetains, PageableCopies and CopiedBytes is zero.
type FakeCounts struct {
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

// FakeDeviceBytes is the memory of each fake GPU.
const FakeDeviceBytes = 80 << 30

var fakeIDs atomic.Uint64

// NewFakeDriver returns a driver with two fake GPUs.
func NewFakeDriver() *FakeDriver {
	return &FakeDriver{
		id:      fakeIDs.Add(1),
		names:   []string{"Fake GPU 0", "Fake GPU 1"},
		total:   FakeDeviceBytes,
		next:    0x7f0000000000,
		ctxRefs: make([]int, 2),
		dev:     map[DevicePtr]*fakeAlloc{},
		host:    map[*byte]int{},
		streams: map[Stream]*fakeStream{},
		events:  map[Event]*fakeEvent{},
		fail:    map[string]fakeFailure{},
	}
}

// FailNext makes the next call of the named CUDA function (e.g.
// "cuMemAlloc_v2") fail with r.
func (f *FakeDriver) FailNext(call string, r Result) { f.FailAfter(call, 0, r) }

// FailAfter lets n calls of the named function succeed, then fails one with r.
func (f *FakeDriver) FailAfter(call string, n int, r Result) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[call] = fakeFailure{skip: n, result: r}
}

// Counts reports what the driver holds now.
func (f *FakeDriver) Counts() FakeCounts {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := FakeCounts{DeviceAllocs: len(f.dev), HostAllocs: len(f.host), Streams: len(f.streams), Events: len(f.events),
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
func (f *FakeDriver) DeviceMemory(p DevicePtr, n int) []byte {
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
func (f *FakeDriver) OpenIPC(h []byte) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(h) != IPCHandleSize || string(h[:8]) != "fakeipc\x00" || binary.LittleEndian.Uint64(h[8:]) != f.id {
		return nil, f.err("cuIpcOpenMemHandle", ErrInvalidValue)
	}
	a := f.dev[DevicePtr(binary.LittleEndian.Uint64(h[16:]))]
	if a == nil || uint64(len(a.mem)) != binary.LittleEndian.Uint64(h[24:]) {
		return nil, f.err("cuIpcOpenMemHandle", ErrInvalidHandle)
	}
	return a.mem, nil
}

// ReadIPC copies n bytes at off of memory OpenIPC returned, under the
// driver's lock, as a synchronous device-to-host copy would: a reader that
// learnt of the bytes through shared memory (a control block) rather than
// through the driver then sees them ordered after the copy that wrote them,
// for the race detector too.
func (f *FakeDriver) ReadIPC(mem []byte, off, n int) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]byte(nil), mem[off:off+n]...)
}

func (f *FakeDriver) err(call string, r Result) error {
	return &Error{Call: call, Result: r, Name: r.Name(), Desc: "injected by the fake driver"}
}

// enter is called with f.mu held at the start of every call: it returns the
// injected failure, if this call is the one to fail.
func (f *FakeDriver) enter(call string) error {
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
func (f *FakeDriver) device(call string, ctx Context) (int, error) {
	if err := f.enter(call); err != nil {
		return 0, err
	}
	d := int(ctx) - 1
	if d < 0 || d >= len(f.ctxRefs) || f.ctxRefs[d] == 0 {
		return 0, &Error{Call: call, Result: ErrInvalidContext, Name: ErrInvalidContext.Name()}
	}
	return d, nil
}

func (f *FakeDriver) handle() uintptr {
	f.next += 512
	return f.next
}

func (f *FakeDriver) find(p DevicePtr, n int) (*fakeAlloc, int) {
	for base, a := range f.dev {
		if p >= base && uint64(p-base)+uint64(n) <= uint64(len(a.mem)) {
			return a, int(p - base)
		}
	}
	return nil, 0
}

// Version implements Driver.
func (f *FakeDriver) Version() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return 12040, f.enter("cuDriverGetVersion")
}

// DeviceCount implements Driver.
func (f *FakeDriver) DeviceCount() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.names), f.enter("cuDeviceGetCount")
}

// DeviceName implements Driver.
func (f *FakeDriver) DeviceName(dev int) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("cuDeviceGetName"); err != nil {
		return "", err
	}
	if dev < 0 || dev >= len(f.names) {
		return "", f.err("cuDeviceGet", ErrInvalidDevice)
	}
	return f.names[dev], nil
}

// RetainPrimaryContext implements Driver.
func (f *FakeDriver) RetainPrimaryContext(dev int) (Context, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("cuDeviceGet"); err != nil {
		return 0, err
	}
	if dev < 0 || dev >= len(f.names) {
		return 0, &Error{Call: "cuDeviceGet", Result: ErrInvalidDevice, Name: ErrInvalidDevice.Name()}
	}
	if err := f.enter("cuDevicePrimaryCtxRetain"); err != nil {
		return 0, err
	}
	f.ctxRefs[dev]++
	f.retains++
	return Context(dev + 1), nil
}

// ReleasePrimaryContext implements Driver.
func (f *FakeDriver) ReleasePrimaryContext(dev int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("cuDevicePrimaryCtxRelease_v2"); err != nil {
		return err
	}
	if dev < 0 || dev >= len(f.names) || f.ctxRefs[dev] == 0 {
		return f.err("cuDevicePrimaryCtxRelease_v2", ErrInvalidContext)
	}
	f.ctxRefs[dev]--
	return nil
}

// MemGetInfo implements Driver.
func (f *FakeDriver) MemGetInfo(ctx Context) (uint64, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.device("cuMemGetInfo_v2", ctx)
	if err != nil {
		return 0, 0, err
	}
	return f.total - f.used(d), f.total, nil
}

func (f *FakeDriver) used(dev int) uint64 {
	var n uint64
	for _, a := range f.dev {
		if a.dev == dev {
			n += uint64(len(a.mem))
		}
	}
	return n
}

// MemAlloc implements Driver.
func (f *FakeDriver) MemAlloc(ctx Context, n int) (DevicePtr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.device("cuMemAlloc_v2", ctx)
	if err != nil {
		return 0, err
	}
	if n <= 0 {
		return 0, f.err("cuMemAlloc_v2", ErrInvalidValue)
	}
	if uint64(n) > f.total-f.used(d) {
		return 0, &Error{Call: "cuMemAlloc_v2", Result: ErrOutOfMemory, Name: ErrOutOfMemory.Name(), Desc: "out of memory"}
	}
	p := DevicePtr(f.next + 512)
	f.next += uintptr(n+1023) &^ 511 // keep allocations apart and 512-aligned
	f.dev[p] = &fakeAlloc{dev: d, mem: make([]byte, n)}
	return p, nil
}

// MemFree implements Driver.
func (f *FakeDriver) MemFree(ctx Context, p DevicePtr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.device("cuMemFree_v2", ctx); err != nil {
		return err
	}
	if f.dev[p] == nil {
		return f.err("cuMemFree_v2", ErrInvalidValue)
	}
	delete(f.dev, p)
	return nil
}

// IPCGetMemHandle implements Driver.
func (f *FakeDriver) IPCGetMemHandle(ctx Context, p DevicePtr) (IPCMemHandle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var h IPCMemHandle
	if _, err := f.device("cuIpcGetMemHandle", ctx); err != nil {
		return h, err
	}
	a := f.dev[p]
	if a == nil {
		return h, f.err("cuIpcGetMemHandle", ErrInvalidValue)
	}
	copy(h[:], "fakeipc\x00")
	binary.LittleEndian.PutUint64(h[8:], f.id)
	binary.LittleEndian.PutUint64(h[16:], uint64(p))
	binary.LittleEndian.PutUint64(h[24:], uint64(len(a.mem)))
	return h, nil
}

// HostAlloc implements Driver.
func (f *FakeDriver) HostAlloc(ctx Context, n int) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.device("cuMemHostAlloc", ctx); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, f.err("cuMemHostAlloc", ErrInvalidValue)
	}
	b := make([]byte, n)
	f.host[unsafe.SliceData(b)] = n
	return b, nil
}

// HostFree implements Driver.
func (f *FakeDriver) HostFree(ctx Context, b []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.device("cuMemFreeHost", ctx); err != nil {
		return err
	}
	if _, ok := f.host[unsafe.SliceData(b)]; !ok || len(b) == 0 {
		return f.err("cuMemFreeHost", ErrInvalidValue)
	}
	delete(f.host, unsafe.SliceData(b))
	return nil
}

// pinned reports whether src lies inside one HostAlloc allocation.
func (f *FakeDriver) pinned(src []byte) bool {
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

// StreamCreate implements Driver.
func (f *FakeDriver) StreamCreate(ctx Context) (Stream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.device("cuStreamCreate", ctx)
	if err != nil {
		return 0, err
	}
	s := Stream(f.handle())
	f.streams[s] = &fakeStream{dev: d}
	return s, nil
}

// StreamDestroy implements Driver: queued work still completes, as on a GPU.
func (f *FakeDriver) StreamDestroy(ctx Context, s Stream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.device("cuStreamDestroy_v2", ctx); err != nil {
		return err
	}
	st := f.streams[s]
	if st == nil {
		return f.err("cuStreamDestroy_v2", ErrInvalidHandle)
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

// EventCreate implements Driver.
func (f *FakeDriver) EventCreate(ctx Context) (Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.device("cuEventCreate", ctx)
	if err != nil {
		return 0, err
	}
	e := Event(f.handle())
	f.events[e] = &fakeEvent{dev: d}
	return e, nil
}

// EventDestroy implements Driver.
func (f *FakeDriver) EventDestroy(ctx Context, e Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.device("cuEventDestroy_v2", ctx); err != nil {
		return err
	}
	if f.events[e] == nil {
		return f.err("cuEventDestroy_v2", ErrInvalidHandle)
	}
	delete(f.events, e)
	return nil
}

// MemcpyHtoDAsync implements Driver: the copy runs when an event recorded
// after it is waited for, reading src at that moment as DMA would.
func (f *FakeDriver) MemcpyHtoDAsync(ctx Context, dst DevicePtr, src []byte, s Stream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.device("cuMemcpyHtoDAsync_v2", ctx); err != nil {
		return err
	}
	st := f.streams[s]
	if st == nil {
		return f.err("cuMemcpyHtoDAsync_v2", ErrInvalidHandle)
	}
	a, off := f.find(dst, len(src))
	if a == nil {
		return &Error{Call: "cuMemcpyHtoDAsync_v2", Result: ErrInvalidValue, Name: ErrInvalidValue.Name(),
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

// EventRecord implements Driver.
func (f *FakeDriver) EventRecord(ctx Context, e Event, s Stream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.device("cuEventRecord", ctx); err != nil {
		return err
	}
	ev, st := f.events[e], f.streams[s]
	if ev == nil || st == nil {
		return f.err("cuEventRecord", ErrInvalidHandle)
	}
	ev.stream, ev.upTo, ev.queries = st, len(st.ops), 0
	return nil
}

// EventSynchronize implements Driver.
func (f *FakeDriver) EventSynchronize(ctx Context, e Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.device("cuEventSynchronize", ctx); err != nil {
		return err
	}
	f.syncs++
	ev := f.events[e]
	if ev == nil {
		return f.err("cuEventSynchronize", ErrInvalidHandle)
	}
	if ev.stream != nil {
		ev.stream.run(ev.upTo)
	}
	return nil
}

// SetPendingQueries makes every event recorded from now on answer n queries
// with "not yet" before it completes, as a copy still in flight would.
func (f *FakeDriver) SetPendingQueries(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pending = n
}

// EventQuery implements Driver: a fake event completes when first asked,
// or after SetPendingQueries' count of queries.
func (f *FakeDriver) EventQuery(ctx Context, e Event) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.device("cuEventQuery", ctx); err != nil {
		return false, err
	}
	ev := f.events[e]
	if ev == nil {
		return false, f.err("cuEventQuery", ErrInvalidHandle)
	}
	if ev.queries++; ev.queries <= f.pending {
		return false, nil
	}
	if ev.stream != nil {
		ev.stream.run(ev.upTo)
	}
	return true, nil
}
