"""The few CUDA driver calls the client makes, through ctypes.

The binding loads ``libcuda.so.1`` (or another library, e.g. the tests'
stand-in) when it is made; :mod:`dataloaderd._cuda` keeps one per process.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Callable, Dict, List, Tuple

from .errors import CudaError, CudaUnavailableError

IPC_HANDLE_SIZE = 64
_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1
_CUDA_ERROR_NO_DEVICE = 100


class _IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * IPC_HANDLE_SIZE)]


_c_int, _c_uint, _c_void_p, _c_size_t = ctypes.c_int, ctypes.c_uint, ctypes.c_void_p, ctypes.c_size_t
_cuptr = ctypes.c_ulonglong
# name: (symbols, newest first; argument types). Every one returns a CUresult.
_FUNCTIONS: List[Tuple[str, List[str], List[type]]] = [
    ("init", ["cuInit"], [_c_uint]),
    ("device_get", ["cuDeviceGet"], [ctypes.POINTER(_c_int), _c_int]),
    ("retain", ["cuDevicePrimaryCtxRetain"], [ctypes.POINTER(_c_void_p), _c_int]),
    ("release", ["cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"], [_c_int]),
    ("push", ["cuCtxPushCurrent_v2", "cuCtxPushCurrent"], [_c_void_p]),
    ("pop", ["cuCtxPopCurrent_v2", "cuCtxPopCurrent"], [ctypes.POINTER(_c_void_p)]),
    ("ipc_open", ["cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle"], [ctypes.POINTER(_cuptr), _IpcHandle, _c_uint]),
    ("ipc_close", ["cuIpcCloseMemHandle"], [_cuptr]),
    ("host_register", ["cuMemHostRegister_v2", "cuMemHostRegister"], [_c_void_p, _c_size_t, _c_uint]),
    ("host_unregister", ["cuMemHostUnregister"], [_c_void_p]),
    ("mem_get_info", ["cuMemGetInfo_v2"], [ctypes.POINTER(_c_size_t), ctypes.POINTER(_c_size_t)]),
    ("error_name", ["cuGetErrorName"], [_c_int, ctypes.POINTER(ctypes.c_char_p)]),
    ("error_string", ["cuGetErrorString"], [_c_int, ctypes.POINTER(ctypes.c_char_p)]),
]


class _Driver:
    """The driver library, its functions looked up once."""

    def __init__(self, library: str = "libcuda.so.1"):
        try:
            lib = ctypes.CDLL(library)
        except OSError as e:
            raise CudaUnavailableError(
                f"cannot load {library} ({e}): no NVIDIA driver on this machine; use transport='shm'") from e
        self._lib = lib
        self._fns: Dict[str, Tuple[str, Callable[..., int]]] = {}
        for name, alts, args in _FUNCTIONS:
            for sym in alts:
                fn = getattr(lib, sym, None)
                if fn is not None:
                    fn.argtypes, fn.restype = args, _c_int
                    self._fns[name] = (sym, fn)
                    break
            else:
                raise CudaUnavailableError(f"{library} has no {alts[0]}: the NVIDIA driver is too old")
        self.call("init", 0)
        self._lock = threading.Lock()
        self._refs: Dict[int, Tuple[int, int]] = {}  # device: (primary context, references)

    def _describe(self, r: int) -> Tuple[str, str]:
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        self._fns["error_name"][1](r, ctypes.byref(name))
        self._fns["error_string"][1](r, ctypes.byref(text))
        return ((name.value or b"CUresult(%d)" % r).decode(), (text.value or b"").decode())

    def call(self, name: str, *args: object) -> int:
        """Calls a driver function; raises CudaError naming it and its result."""
        sym, fn = self._fns[name]
        r = fn(*args)
        if r == 0:
            return r
        rname, text = self._describe(r)
        if name == "init" and r == _CUDA_ERROR_NO_DEVICE:
            raise CudaUnavailableError(f"the NVIDIA driver sees no GPU ({sym}: {rname}); use transport='shm'")
        raise CudaError(sym, rname, f"{sym}: {rname} ({text})")

    def retain(self, device: int) -> int:
        """Retains device's primary context (the one torch uses); refcounted here."""
        with self._lock:
            if device in self._refs:
                ctx, n = self._refs[device]
            else:
                d, p = ctypes.c_int(), ctypes.c_void_p()
                self.call("device_get", ctypes.byref(d), device)
                self.call("retain", ctypes.byref(p), d.value)
                ctx, n = p.value or 0, 0
            self._refs[device] = (ctx, n + 1)
            return ctx

    def release(self, device: int) -> None:
        with self._lock:
            ctx, n = self._refs.get(device, (0, 0))
            if n > 1:
                self._refs[device] = (ctx, n - 1)
            elif n == 1:
                del self._refs[device]
                d = ctypes.c_int()
                self.call("device_get", ctypes.byref(d), device)
                self.call("release", d.value)

    def in_context(self, ctx: int) -> _Current:
        return _Current(self, ctx)


class _Current:
    """Makes a context current on this thread for a with-block."""

    def __init__(self, drv: _Driver, ctx: int):
        self._drv, self._ctx = drv, ctx

    def __enter__(self) -> None:
        self._drv.call("push", ctypes.c_void_p(self._ctx))

    def __exit__(self, *exc: object) -> None:
        self._drv.call("pop", ctypes.byref(ctypes.c_void_p()))


class _Mapping:
    """One opened IPC allocation; unmapped when the ring is closed and no
    tensor view of it is alive any more (views hold a reference)."""

    def __init__(self, drv: _Driver, device: int, handle: bytes):
        self._drv, self.device = drv, device
        self._ctx = drv.retain(device)
        self.ptr = 0
        try:
            h = _IpcHandle()
            ctypes.memmove(ctypes.addressof(h), handle, IPC_HANDLE_SIZE)
            p = ctypes.c_ulonglong()
            with drv.in_context(self._ctx):
                drv.call("ipc_open", ctypes.byref(p), h, _CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
            self.ptr = p.value
        except BaseException:
            drv.release(device)
            raise

    def __del__(self) -> None:
        ptr, self.ptr = self.ptr, 0
        if not ptr:
            return
        try:
            with self._drv.in_context(self._ctx):
                self._drv.call("ipc_close", ctypes.c_ulonglong(ptr))
            self._drv.release(self.device)
        except Exception:
            pass  # at interpreter exit the driver may be gone; the OS reclaims it
