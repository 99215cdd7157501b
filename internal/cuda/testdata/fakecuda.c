/* A stand-in for libcuda.so.1 on machines without a GPU, so the tests can
 * call the real purego binding (and the Python client its ctypes one):
 * device memory is host memory in a file under /dev/shm, so that another
 * process can open its IPC handle; copies are synchronous, and every call
 * that needs a context fails with CUDA_ERROR_INVALID_CONTEXT unless the
 * calling thread made one current, as the real driver does. Built by
 * libcuda_test.go and by the Python tests with the system cc.
 *
 * IPC handle (64 bytes): "fakecuda", the exporter's address (u64), the size
 * (u64), then the file's name under /dev/shm, NUL-terminated. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

static int ctxs[2];
static int refs[2];
static __thread int *current;
static int initialized;
static long live_dev, live_host, live_streams, live_events;

#define NEED_CTX  do { if (!current) return 201; } while (0)

CUresult cuInit(unsigned flags) {
	const char *r = getenv("FAKECUDA_INIT_RESULT");
	if (r && *r) return atoi(r);
	if (flags) return 1;
	initialized = 1;
	return 0;
}
CUresult cuDriverGetVersion(int *v) { *v = 12040; return 0; }
CUresult cuDeviceGetCount(int *n) { if (!initialized) return 3; *n = 2; return 0; }
CUresult cuDeviceGet(int *d, int ordinal) {
	if (!initialized) return 3;
	if (ordinal < 0 || ordinal > 1) return 101;
	*d = ordinal;
	return 0;
}
CUresult cuDeviceGetName(char *name, int len, int d) { snprintf(name, len, "Fake CUDA device %d", d); return 0; }
CUresult cuDevicePrimaryCtxRetain(int **ctx, int d) { refs[d]++; *ctx = &ctxs[d]; return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int d) { if (!refs[d]) return 201; refs[d]--; return 0; }
CUresult cuCtxSetCurrent(int *ctx) { current = ctx; return 0; }
CUresult cuMemGetInfo_v2(size_t *free_, size_t *total) { NEED_CTX; *total = 1 << 30; *free_ = *total - live_dev; return 0; }
/* Mappings of device memory in this process: allocations (named files)
 * and IPC opens of another process's allocations. */
#define MAXMAPS 64
static struct { void *p; size_t n; char name[32]; int owned; } maps[MAXMAPS];
/* Guards maps and the allocation counters: the daemon allocates and frees
 * from concurrent sessions. */
static int maps_lock;
static void lock(void) { while (__atomic_exchange_n(&maps_lock, 1, __ATOMIC_ACQUIRE)) {} }
static void unlock(void) { __atomic_store_n(&maps_lock, 0, __ATOMIC_RELEASE); }

static int track(void *p, size_t n, const char *name, int owned) {
	for (int i = 0; i < MAXMAPS; i++) {
		if (!maps[i].p) {
			maps[i].p = p;
			maps[i].n = n;
			snprintf(maps[i].name, sizeof maps[i].name, "%s", name);
			maps[i].owned = owned;
			return 0;
		}
	}
	return -1;
}
static int untrack(void *p, int owned) {
	for (int i = 0; i < MAXMAPS; i++) {
		if (maps[i].p == p && maps[i].owned == owned) {
			munmap(p, maps[i].n);
			if (owned) {
				char path[64];
				snprintf(path, sizeof path, "/dev/shm/%s", maps[i].name);
				unlink(path);
			}
			maps[i].p = 0;
			return 0;
		}
	}
	return -1;
}
static void *map_file(const char *name, size_t n, int create) {
	char path[64];
	snprintf(path, sizeof path, "/dev/shm/%s", name);
	int fd = open(path, create ? O_RDWR | O_CREAT | O_EXCL : O_RDWR, 0600);
	if (fd < 0) return 0;
	if (create && ftruncate(fd, n) != 0) { close(fd); unlink(path); return 0; }
	void *m = mmap(0, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED) { if (create) unlink(path); return 0; }
	return m;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
	static int seq;
	NEED_CTX;
	if (n > (1u << 30)) return 2;
	char name[32];
	snprintf(name, sizeof name, "fakecuda-%d-%d", (int)getpid(), __atomic_fetch_add(&seq, 1, __ATOMIC_RELAXED));
	void *m = map_file(name, n, 1);
	if (!m) return 2;
	lock();
	int full = track(m, n, name, 1);
	if (!full) live_dev++;
	unlock();
	if (full) {
		char path[64];
		snprintf(path, sizeof path, "/dev/shm/%s", name);
		munmap(m, n);
		unlink(path);
		return 2;
	}
	*p = (CUdeviceptr)m;
	return 0;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
	NEED_CTX;
	lock();
	int bad = untrack((void *)p, 1);
	if (!bad) live_dev--;
	unlock();
	return bad ? 1 : 0;
}
CUresult cuIpcGetMemHandle(unsigned char *h, CUdeviceptr p) {
	NEED_CTX;
	CUresult r = 1;
	lock();
	for (int i = 0; i < MAXMAPS; i++) {
		if (maps[i].p == (void *)p && maps[i].owned) {
			memset(h, 0, 64);
			memcpy(h, "fakecuda", 8);
			memcpy(h + 8, &p, sizeof p);
			memcpy(h + 16, &maps[i].n, sizeof maps[i].n);
			snprintf((char *)h + 24, 40, "%s", maps[i].name);
			r = 0;
			break;
		}
	}
	unlock();
	return r;
}
CUresult cuMemHostAlloc(void **pp, size_t n, unsigned flags) {
	NEED_CTX;
	if (flags != 1) return 1; /* the ring asks for portable pinned memory */
	*pp = malloc(n);
	live_host++;
	return 0;
}
CUresult cuMemFreeHost(void *p) { NEED_CTX; free(p); live_host--; return 0; }
CUresult cuStreamCreate(void **s, unsigned flags) {
	NEED_CTX;
	if (flags != 1) return 1; /* non-blocking */
	*s = malloc(1);
	live_streams++;
	return 0;
}
CUresult cuStreamDestroy_v2(void *s) { NEED_CTX; free(s); live_streams--; return 0; }
CUresult cuEventCreate(void **e, unsigned flags) {
	NEED_CTX;
	if (flags != 3) return 1; /* blocking sync, no timing */
	*e = malloc(1);
	live_events++;
	return 0;
}
CUresult cuEventDestroy_v2(void *e) { NEED_CTX; free(e); live_events--; return 0; }
CUresult cuEventRecord(void *e, void *s) { NEED_CTX; return e && s ? 0 : 400; }
CUresult cuEventSynchronize(void *e) { return e ? 0 : 400; }
CUresult cuEventQuery(void *e) { static int n; return e ? (n++ % 2 ? 0 : 600) : 400; }
#ifndef OLD_DRIVER
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *s) {
	NEED_CTX;
	if (!s) return 400;
	memcpy((void *)dst, src, n);
	return 0;
}
#endif
CUresult cuGetErrorName(CUresult r, const char **s) {
	switch (r) {
	case 1: *s = "CUDA_ERROR_INVALID_VALUE"; return 0;
	case 2: *s = "CUDA_ERROR_OUT_OF_MEMORY"; return 0;
	case 3: *s = "CUDA_ERROR_NOT_INITIALIZED"; return 0;
	case 100: *s = "CUDA_ERROR_NO_DEVICE"; return 0;
	case 201: *s = "CUDA_ERROR_INVALID_CONTEXT"; return 0;
	case 400: *s = "CUDA_ERROR_INVALID_HANDLE"; return 0;
	case 600: *s = "CUDA_ERROR_NOT_READY"; return 0;
	}
	*s = 0;
	return 1;
}
CUresult cuGetErrorString(CUresult r, const char **s) {
	*s = r == 100 ? "no CUDA-capable device is detected" : "fake error";
	return 0;
}

/* The calls the Python client (_cuda.py) makes. */
static __thread int *stack[8];
static __thread int depth;
static long live_ipc, live_registered;
CUresult cuCtxPushCurrent_v2(int *ctx) { if (depth == 8) return 1; stack[depth++] = current; current = ctx; return 0; }
CUresult cuCtxPopCurrent_v2(int **ctx) { if (!depth) return 201; if (ctx) *ctx = current; current = stack[--depth]; return 0; }
typedef struct { unsigned char b[64]; } ipc_handle; /* passed by value */
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, ipc_handle h, unsigned flags) {
	NEED_CTX;
	if (memcmp(h.b, "fakecuda", 8) || flags != 1 || h.b[63]) return 1;
	size_t n;
	memcpy(&n, h.b + 16, sizeof n);
	const char *name = (const char *)h.b + 24;
	void *m = map_file(name, n, 0);
	if (!m) return 400; /* CUDA_ERROR_INVALID_HANDLE */
	lock();
	int full = track(m, n, name, 0);
	if (!full) live_ipc++;
	unlock();
	if (full) { munmap(m, n); return 2; }
	*p = (CUdeviceptr)m;
	return 0;
}
CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
	NEED_CTX;
	lock();
	int bad = !p || untrack((void *)p, 0);
	if (!bad) live_ipc--;
	unlock();
	return bad ? 1 : 0;
}
CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags) { NEED_CTX; if (!p || !n || flags != 9) return 1; live_registered++; return 0; }
CUresult cuMemHostUnregister(void *p) { NEED_CTX; if (!live_registered) return 713; live_registered--; return 0; }
long fakecuda_python_live(void) { return live_ipc + live_registered + refs[0] + refs[1] + depth; }

/* For the test: what is live, and the bytes at a device address. */
long fakecuda_live(void) { return live_dev + live_host + live_streams + live_events + refs[0] + refs[1]; }
void fakecuda_read(void *dst, CUdeviceptr src, size_t n) { memcpy(dst, (void *)src, n); }
