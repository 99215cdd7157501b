package cuda

import (
	"fmt"

	"github.com/dataloaderd/dataloaderd/internal/errkind"
)

// Driver is the part of the CUDA driver API that device rings use. The real
// one (OpenDriver) calls libcuda.so.1 loaded at run time, so one binary runs
// with and without a GPU; the fake one (NewFakeDriver) keeps device memory in
// host memory for tests.
//
// Calls that need a CUDA context take it explicitly: a context is current per
// OS thread and goroutines move between threads, so the real driver makes
// ctx current on a locked thread for the length of each call.
type Driver interface {
	// Version is the driver's CUDA version, 1000*major + 10*minor.
	Version() (int, error)
	// DeviceCount is the number of visible GPUs.
	DeviceCount() (int, error)
	// DeviceName is the product name of GPU dev.
	DeviceName(dev int) (string, error)
	// RetainPrimaryContext retains GPU dev's primary context, the one that
	// the CUDA runtime (and so PyTorch) uses too.
	RetainPrimaryContext(dev int) (Context, error)
	// ReleasePrimaryContext drops one reference taken by RetainPrimaryContext.
	ReleasePrimaryContext(dev int) error
	// MemGetInfo is the free and total memory of ctx's GPU.
	MemGetInfo(ctx Context) (free, total uint64, err error)
	// MemAlloc allocates n bytes of device memory (cuMemAlloc_v2).
	MemAlloc(ctx Context, n int) (DevicePtr, error)
	// MemFree frees what MemAlloc returned.
	MemFree(ctx Context, p DevicePtr) error
	// IPCGetMemHandle exports a MemAlloc allocation to other processes.
	IPCGetMemHandle(ctx Context, p DevicePtr) (IPCMemHandle, error)
	// HostAlloc allocates n bytes of page-locked (pinned) host memory that
	// the GPU copies from by DMA.
	HostAlloc(ctx Context, n int) ([]byte, error)
	// HostFree frees what HostAlloc returned.
	HostFree(ctx Context, b []byte) error
	// StreamCreate creates a stream that does not synchronize with the
	// legacy default stream.
	StreamCreate(ctx Context) (Stream, error)
	// StreamDestroy destroys a stream.
	StreamDestroy(ctx Context, s Stream) error
	// EventCreate creates an event without timing whose Synchronize sleeps
	// instead of spinning a core.
	EventCreate(ctx Context) (Event, error)
	// EventDestroy destroys an event.
	EventDestroy(ctx Context, e Event) error
	// MemcpyHtoDAsync queues a copy of src to dst on stream s. src must stay
	// untouched until the copy is done (an event recorded after it completes).
	MemcpyHtoDAsync(ctx Context, dst DevicePtr, src []byte, s Stream) error
	// EventRecord records e on s: it completes when the work queued on s
	// before it has.
	EventRecord(ctx Context, e Event, s Stream) error
	// EventSynchronize blocks until e has completed.
	EventSynchronize(ctx Context, e Event) error
	// EventQuery reports whether e has completed, without blocking.
	EventQuery(ctx Context, e Event) (bool, error)
}

// Context is a CUDA context (CUcontext).
type Context uintptr

// DevicePtr is an address in device memory (CUdeviceptr).
type DevicePtr uint64

// Stream is a CUDA stream (CUstream).
type Stream uintptr

// Event is a CUDA event (CUevent).
type Event uintptr

// IPCHandleSize is the size of a CUDA IPC memory handle (CU_IPC_HANDLE_SIZE).
const IPCHandleSize = 64

// IPCMemHandle is a CUipcMemHandle: opaque bytes another process passes to
// cuIpcOpenMemHandle to map the allocation.
type IPCMemHandle [IPCHandleSize]byte

// DefaultLibrary is the CUDA driver library, installed with the NVIDIA driver
// (not with the CUDA toolkit).
const DefaultLibrary = "libcuda.so.1"

// ErrNoDriver marks a machine without the CUDA driver library: the cuda
// transport is unavailable there, shm and inline are not affected.
var ErrNoDriver = errkind.New(errkind.Unimplemented, "no CUDA driver")

// Result is a CUDA driver result code (CUresult).
type Result int32

// Result codes the daemon handles or tests inject; the driver names any
// other code itself.
const (
	Success              Result = 0
	ErrInvalidValue      Result = 1
	ErrOutOfMemory       Result = 2
	ErrNotInitialized    Result = 3
	ErrDeinitialized     Result = 4
	ErrNoDevice          Result = 100
	ErrInvalidDevice     Result = 101
	ErrInvalidContext    Result = 201
	ErrMapFailed         Result = 205
	ErrInvalidHandle     Result = 400
	ErrNotFound          Result = 500
	ErrNotReady          Result = 600
	ErrIllegalAddress    Result = 700
	ErrNotPermitted      Result = 800
	ErrNotSupported      Result = 801
	ErrSystemNotReady    Result = 802
	ErrDriverMismatch    Result = 803
	ErrUnknown           Result = 999
	ErrInsufficientDrv   Result = 35
	ErrStubLibrary       Result = 34
	ErrAlreadyMapped     Result = 208
	ErrHostMemRegistered Result = 712
)

var resultNames = map[Result]string{
	Success:              "CUDA_SUCCESS",
	ErrInvalidValue:      "CUDA_ERROR_INVALID_VALUE",
	ErrOutOfMemory:       "CUDA_ERROR_OUT_OF_MEMORY",
	ErrNotInitialized:    "CUDA_ERROR_NOT_INITIALIZED",
	ErrDeinitialized:     "CUDA_ERROR_DEINITIALIZED",
	ErrNoDevice:          "CUDA_ERROR_NO_DEVICE",
	ErrInvalidDevice:     "CUDA_ERROR_INVALID_DEVICE",
	ErrInvalidContext:    "CUDA_ERROR_INVALID_CONTEXT",
	ErrMapFailed:         "CUDA_ERROR_MAP_FAILED",
	ErrInvalidHandle:     "CUDA_ERROR_INVALID_HANDLE",
	ErrNotFound:          "CUDA_ERROR_NOT_FOUND",
	ErrNotReady:          "CUDA_ERROR_NOT_READY",
	ErrIllegalAddress:    "CUDA_ERROR_ILLEGAL_ADDRESS",
	ErrNotPermitted:      "CUDA_ERROR_NOT_PERMITTED",
	ErrNotSupported:      "CUDA_ERROR_NOT_SUPPORTED",
	ErrSystemNotReady:    "CUDA_ERROR_SYSTEM_NOT_READY",
	ErrDriverMismatch:    "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
	ErrUnknown:           "CUDA_ERROR_UNKNOWN",
	ErrInsufficientDrv:   "CUDA_ERROR_INSUFFICIENT_DRIVER",
	ErrStubLibrary:       "CUDA_ERROR_STUB_LIBRARY",
	ErrAlreadyMapped:     "CUDA_ERROR_ALREADY_MAPPED",
	ErrHostMemRegistered: "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
}

// Name is the result's CUresult name, e.g. CUDA_ERROR_OUT_OF_MEMORY.
func (r Result) Name() string {
	if n, ok := resultNames[r]; ok {
		return n
	}
	return fmt.Sprintf("CUresult(%d)", int32(r))
}

// Error is a failed driver call: which call, and the CUDA result with its
// name and the driver's description.
type Error struct {
	Call   string // e.g. "cuMemAlloc_v2"
	Result Result
	Name   string // e.g. "CUDA_ERROR_OUT_OF_MEMORY"
	Desc   string // the driver's words, may be empty
}

func (e *Error) Error() string {
	if e.Desc != "" {
		return fmt.Sprintf("%s: %s (%s)", e.Call, e.Name, e.Desc)
	}
	return fmt.Sprintf("%s: %s", e.Call, e.Name)
}

// Is makes errors.Is(err, cuda.ErrOutOfMemory) and the like work.
func (e *Error) Is(target error) bool {
	var r Result
	switch t := target.(type) {
	case Result:
		r = t
	case errkind.Kind:
		return e.Result.Is(t)
	default:
		return false
	}
	return e.Result == r
}

// Error lets a Result be an errors.Is target.
func (r Result) Error() string { return r.Name() }

// Is makes running out of device memory of kind errkind.ResourceExhausted.
func (r Result) Is(target error) bool {
	return r == ErrOutOfMemory && target == errkind.ResourceExhausted
}
