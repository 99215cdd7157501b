package cuda

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Flags of the driver API that the real driver passes.
const (
	cuMemHostAllocPortable = 0x1 // pinned for every context, not only the current one
	cuStreamNonBlocking    = 0x1 // no implicit sync with the legacy default stream
	cuEventBlockingSync    = 0x1 // Synchronize sleeps instead of spinning a core
	cuEventDisableTiming   = 0x2
)

// libcuda is the Driver over libcuda.so.1, loaded with dlopen at run time
// through purego: no cgo, so the binary builds without a C toolchain and for
// other architectures, and runs where there is no driver (OpenDriver then
// returns ErrNoDriver).
type libcuda struct {
	path string

	cuInit                    func(flags uint32) Result
	cuDriverGetVersion        func(v *int32) Result
	cuDeviceGetCount          func(n *int32) Result
	cuDeviceGet               func(d *int32, ordinal int32) Result
	cuDeviceGetName           func(name *byte, n int32, d int32) Result
	cuDevicePrimaryCtxRetain  func(ctx *uintptr, d int32) Result
	cuDevicePrimaryCtxRelease func(d int32) Result
	cuCtxSetCurrent           func(ctx uintptr) Result
	cuMemGetInfo              func(free, total *uint64) Result
	cuMemAlloc                func(p *uint64, n uintptr) Result
	cuMemFree                 func(p uint64) Result
	cuIpcGetMemHandle         func(h *IPCMemHandle, p uint64) Result
	cuMemHostAlloc            func(pp *unsafe.Pointer, n uintptr, flags uint32) Result
	cuMemFreeHost             func(p unsafe.Pointer) Result
	cuStreamCreate            func(s *uintptr, flags uint32) Result
	cuStreamDestroy           func(s uintptr) Result
	cuEventCreate             func(e *uintptr, flags uint32) Result
	cuEventDestroy            func(e uintptr) Result
	cuEventRecord             func(e, s uintptr) Result
	cuEventSynchronize        func(e uintptr) Result
	cuEventQuery              func(e uintptr) Result
	cuMemcpyHtoDAsync         func(dst uint64, src unsafe.Pointer, n uintptr, s uintptr) Result
	cuGetErrorName            func(r Result, s *unsafe.Pointer) Result
	cuGetErrorString          func(r Result, s *unsafe.Pointer) Result
}

// OpenDriver loads the CUDA driver library (DefaultLibrary, or a path for
// tests) and initializes it. Without the library it returns an error that
// wraps ErrNoDriver; with the library but no usable GPU, a driver *Error
// from cuInit (e.g. CUDA_ERROR_NO_DEVICE).
func OpenDriver(library string) (Driver, error) {
	if library == "" {
		library = DefaultLibrary
	}
	h, err := purego.Dlopen(library, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot load %s (%v); the cuda transport needs the NVIDIA driver, shm and inline work without it",
			ErrNoDriver, library, err)
	}
	l := &libcuda{path: library}
	// The _v2 names are what cuda.h has mapped these calls to since CUDA 4
	// (memory) and 11 (context release, destroy); the plain names are older
	// ABIs with 32-bit sizes or other semantics.
	for _, f := range []struct {
		fn   any
		name string
	}{
		{&l.cuInit, "cuInit"},
		{&l.cuDriverGetVersion, "cuDriverGetVersion"},
		{&l.cuDeviceGetCount, "cuDeviceGetCount"},
		{&l.cuDeviceGet, "cuDeviceGet"},
		{&l.cuDeviceGetName, "cuDeviceGetName"},
		{&l.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"},
		{&l.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"},
		{&l.cuCtxSetCurrent, "cuCtxSetCurrent"},
		{&l.cuMemGetInfo, "cuMemGetInfo_v2"},
		{&l.cuMemAlloc, "cuMemAlloc_v2"},
		{&l.cuMemFree, "cuMemFree_v2"},
		{&l.cuIpcGetMemHandle, "cuIpcGetMemHandle"},
		{&l.cuMemHostAlloc, "cuMemHostAlloc"},
		{&l.cuMemFreeHost, "cuMemFreeHost"},
		{&l.cuStreamCreate, "cuStreamCreate"},
		{&l.cuStreamDestroy, "cuStreamDestroy_v2"},
		{&l.cuEventCreate, "cuEventCreate"},
		{&l.cuEventDestroy, "cuEventDestroy_v2"},
		{&l.cuEventRecord, "cuEventRecord"},
		{&l.cuEventSynchronize, "cuEventSynchronize"},
		{&l.cuEventQuery, "cuEventQuery"},
		{&l.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"},
		{&l.cuGetErrorName, "cuGetErrorName"},
		{&l.cuGetErrorString, "cuGetErrorString"},
	} {
		sym, err := purego.Dlsym(h, f.name)
		if err != nil {
			return nil, fmt.Errorf("%s has no %s: the NVIDIA driver is too old for dataloaderd (need CUDA 11 or newer)", library, f.name)
		}
		purego.RegisterFunc(f.fn, sym)
	}
	if r := l.cuInit(0); r != Success {
		return nil, fmt.Errorf("CUDA driver %s loaded but not usable: %w", library, l.error("cuInit", r))
	}
	return l, nil
}

// error turns a failed result into an *Error with the driver's own words.
func (l *libcuda) error(call string, r Result) error {
	e := &Error{Call: call, Result: r, Name: r.Name()}
	var p unsafe.Pointer
	if l.cuGetErrorName(r, &p) == Success && p != nil {
		e.Name = cString(p)
	}
	p = nil
	if l.cuGetErrorString(r, &p) == Success && p != nil {
		e.Desc = cString(p)
	}
	return e
}

func (l *libcuda) check(call string, r Result) error {
	if r == Success {
		return nil
	}
	return l.error(call, r)
}

// cString reads a NUL-terminated string the driver owns (static storage).
func cString(p unsafe.Pointer) string {
	var b []byte
	for i := 0; i < 1024; i++ {
		c := *(*byte)(unsafe.Add(p, i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

// in runs call with ctx current on a locked OS thread: the current context
// is per thread and a goroutine may move between threads between calls.
func (l *libcuda) in(ctx Context, call func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := l.check("cuCtxSetCurrent", l.cuCtxSetCurrent(uintptr(ctx))); err != nil {
		return err
	}
	return call()
}

func (l *libcuda) device(ordinal int) (int32, error) {
	var d int32
	return d, l.check("cuDeviceGet", l.cuDeviceGet(&d, int32(ordinal)))
}

// Version implements Driver.
func (l *libcuda) Version() (int, error) {
	var v int32
	err := l.check("cuDriverGetVersion", l.cuDriverGetVersion(&v))
	return int(v), err
}

// DeviceCount implements Driver.
func (l *libcuda) DeviceCount() (int, error) {
	var n int32
	err := l.check("cuDeviceGetCount", l.cuDeviceGetCount(&n))
	return int(n), err
}

// DeviceName implements Driver.
func (l *libcuda) DeviceName(dev int) (string, error) {
	d, err := l.device(dev)
	if err != nil {
		return "", err
	}
	var buf [256]byte
	if err := l.check("cuDeviceGetName", l.cuDeviceGetName(&buf[0], int32(len(buf)), d)); err != nil {
		return "", err
	}
	return cString(unsafe.Pointer(&buf[0])), nil
}

// RetainPrimaryContext implements Driver.
func (l *libcuda) RetainPrimaryContext(dev int) (Context, error) {
	d, err := l.device(dev)
	if err != nil {
		return 0, err
	}
	var ctx uintptr
	if err := l.check("cuDevicePrimaryCtxRetain", l.cuDevicePrimaryCtxRetain(&ctx, d)); err != nil {
		return 0, err
	}
	return Context(ctx), nil
}

// ReleasePrimaryContext implements Driver.
func (l *libcuda) ReleasePrimaryContext(dev int) error {
	d, err := l.device(dev)
	if err != nil {
		return err
	}
	return l.check("cuDevicePrimaryCtxRelease_v2", l.cuDevicePrimaryCtxRelease(d))
}

// MemGetInfo implements Driver.
func (l *libcuda) MemGetInfo(ctx Context) (free, total uint64, err error) {
	err = l.in(ctx, func() error { return l.check("cuMemGetInfo_v2", l.cuMemGetInfo(&free, &total)) })
	return free, total, err
}

// MemAlloc implements Driver.
func (l *libcuda) MemAlloc(ctx Context, n int) (DevicePtr, error) {
	var p uint64
	err := l.in(ctx, func() error { return l.check("cuMemAlloc_v2", l.cuMemAlloc(&p, uintptr(n))) })
	return DevicePtr(p), err
}

// MemFree implements Driver.
func (l *libcuda) MemFree(ctx Context, p DevicePtr) error {
	return l.in(ctx, func() error { return l.check("cuMemFree_v2", l.cuMemFree(uint64(p))) })
}

// IPCGetMemHandle implements Driver.
func (l *libcuda) IPCGetMemHandle(ctx Context, p DevicePtr) (IPCMemHandle, error) {
	var h IPCMemHandle
	err := l.in(ctx, func() error { return l.check("cuIpcGetMemHandle", l.cuIpcGetMemHandle(&h, uint64(p))) })
	return h, err
}

// HostAlloc implements Driver. The memory is the driver's, outside the Go
// heap, so it may be handed to asynchronous copies.
func (l *libcuda) HostAlloc(ctx Context, n int) ([]byte, error) {
	var p unsafe.Pointer
	err := l.in(ctx, func() error {
		return l.check("cuMemHostAlloc", l.cuMemHostAlloc(&p, uintptr(n), cuMemHostAllocPortable))
	})
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// HostFree implements Driver.
func (l *libcuda) HostFree(ctx Context, b []byte) error {
	return l.in(ctx, func() error {
		return l.check("cuMemFreeHost", l.cuMemFreeHost(unsafe.Pointer(unsafe.SliceData(b))))
	})
}

// StreamCreate implements Driver.
func (l *libcuda) StreamCreate(ctx Context) (Stream, error) {
	var s uintptr
	err := l.in(ctx, func() error { return l.check("cuStreamCreate", l.cuStreamCreate(&s, cuStreamNonBlocking)) })
	return Stream(s), err
}

// StreamDestroy implements Driver.
func (l *libcuda) StreamDestroy(ctx Context, s Stream) error {
	return l.in(ctx, func() error { return l.check("cuStreamDestroy_v2", l.cuStreamDestroy(uintptr(s))) })
}

// EventCreate implements Driver.
func (l *libcuda) EventCreate(ctx Context) (Event, error) {
	var e uintptr
	err := l.in(ctx, func() error {
		return l.check("cuEventCreate", l.cuEventCreate(&e, cuEventBlockingSync|cuEventDisableTiming))
	})
	return Event(e), err
}

// EventDestroy implements Driver.
func (l *libcuda) EventDestroy(ctx Context, e Event) error {
	return l.in(ctx, func() error { return l.check("cuEventDestroy_v2", l.cuEventDestroy(uintptr(e))) })
}

// MemcpyHtoDAsync implements Driver. src must be memory from HostAlloc:
// the copy reads it after the call returns, which Go memory must not be.
func (l *libcuda) MemcpyHtoDAsync(ctx Context, dst DevicePtr, src []byte, s Stream) error {
	if len(src) == 0 {
		return nil
	}
	return l.in(ctx, func() error {
		return l.check("cuMemcpyHtoDAsync_v2",
			l.cuMemcpyHtoDAsync(uint64(dst), unsafe.Pointer(unsafe.SliceData(src)), uintptr(len(src)), uintptr(s)))
	})
}

// EventRecord implements Driver.
func (l *libcuda) EventRecord(ctx Context, e Event, s Stream) error {
	return l.in(ctx, func() error { return l.check("cuEventRecord", l.cuEventRecord(uintptr(e), uintptr(s))) })
}

// EventSynchronize implements Driver.
func (l *libcuda) EventSynchronize(ctx Context, e Event) error {
	return l.in(ctx, func() error { return l.check("cuEventSynchronize", l.cuEventSynchronize(uintptr(e))) })
}

// EventQuery implements Driver.
func (l *libcuda) EventQuery(ctx Context, e Event) (bool, error) {
	var done bool
	err := l.in(ctx, func() error {
		switch r := l.cuEventQuery(uintptr(e)); r {
		case Success:
			done = true
			return nil
		case ErrNotReady:
			return nil
		default:
			return l.error("cuEventQuery", r)
		}
	})
	return done, err
}
