package cuda

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ebitengine/purego"
)

func TestOpenDriverWithoutLibrary(t *testing.T) {
	lib := filepath.Join(t.TempDir(), "libcuda.so.1")
	_, err := OpenDriver(lib)
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("OpenDriver(%s): %v, want ErrNoDriver", lib, err)
	}
	if !strings.Contains(err.Error(), lib) || !strings.Contains(err.Error(), "shm and inline") {
		t.Fatalf("error %q does not name the library and what still works", err)
	}
}

// buildFakeLib compiles testdata/fakecuda.c into a shared library, so the
// real purego binding is exercised on machines without a GPU.
func buildFakeLib(t *testing.T, defines ...string) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler to build the stand-in libcuda")
	}
	lib := filepath.Join(t.TempDir(), "libcuda.so.1")
	args := append([]string{"-shared", "-fPIC", "-O1", "-o", lib, "testdata/fakecuda.c"}, defines...)
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("cc %v: %v\n%s", args, err, out)
	}
	return lib
}

func TestLibcudaBinding(t *testing.T) {
	lib := buildFakeLib(t)
	drv, err := OpenDriver(lib)
	if err != nil {
		t.Fatal(err)
	}
	h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatal(err)
	}
	var live func() int64
	var read func(dst *byte, src uint64, n uintptr)
	purego.RegisterLibFunc(&live, h, "fakecuda_live")
	purego.RegisterLibFunc(&read, h, "fakecuda_read")

	if v, err := drv.Version(); v != 12040 || err != nil {
		t.Fatalf("Version %d %v", v, err)
	}
	if name, err := drv.DeviceName(1); name != "Fake CUDA device 1" || err != nil {
		t.Fatalf("DeviceName %q %v", name, err)
	}
	devs := NewDevices(drv)
	r, err := devs.NewRing(1, 3, 5000)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		s := r.Slot(i)
		for j := range s {
			s[j] = byte(i*31 + j)
		}
	}
	// Commit from other goroutines, which may run on threads where no
	// context is current: the binding must make it current for each call.
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for i := range 3 {
		wg.Go(func() { errs <- r.Commit(i) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	handle := r.IPCHandle(r.Device())
	if string(handle[:8]) != "fakecuda" {
		t.Fatalf("IPC handle %x", handle[:16])
	}
	base := binary.LittleEndian.Uint64(handle[8:])
	got := make([]byte, r.SlotBytes())
	for i := range 3 {
		read(&got[0], base+uint64(i*r.Stride()), uintptr(len(got)))
		if !bytes.Equal(got, r.Slot(i)) {
			t.Fatalf("device slot %d does not hold the committed bytes", i)
		}
	}
	if free, total, err := r.MemInfo(); err != nil || total-free != 1 {
		t.Fatalf("MemInfo %d %d %v: want one live allocation counted", free, total, err)
	}
	if done, err := drv.EventQuery(r.gpus[0].ctx, r.gpus[0].events[0]); err != nil {
		t.Fatalf("EventQuery: %v %v", done, err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if n := live(); n != 0 {
		t.Fatalf("%d driver objects live after Close", n)
	}
	// A call without a context current fails with the driver's own name.
	_, err = drv.MemAlloc(0, 10)
	CheckError(t, err, "cuMemAlloc_v2", ErrInvalidContext)
	if _, err := devs.NewRing(0, 2, 1<<31); !errors.Is(err, ErrOutOfMemory) || live() != 0 {
		t.Fatalf("2 GiB slots on a 1 GiB fake: %v, %d live", err, live())
	}
}

func TestLibcudaInitFails(t *testing.T) {
	lib := buildFakeLib(t)
	t.Setenv("FAKECUDA_INIT_RESULT", "100")
	_, err := OpenDriver(lib)
	CheckError(t, err, "cuInit", ErrNoDevice)
	if !strings.Contains(err.Error(), "no CUDA-capable device") {
		t.Fatalf("error %q lacks the driver's description", err)
	}
}

func TestLibcudaTooOld(t *testing.T) {
	lib := buildFakeLib(t, "-DOLD_DRIVER")
	_, err := OpenDriver(lib)
	if err == nil || !strings.Contains(err.Error(), "cuMemcpyHtoDAsync_v2") {
		t.Fatalf("driver without cuMemcpyHtoDAsync_v2: %v", err)
	}
}
