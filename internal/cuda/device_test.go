package cuda_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dataloaderd/dataloaderd/internal/cuda"
	"github.com/dataloaderd/dataloaderd/internal/cuda/cudatest"
)

func TestDeviceRingCommit(t *testing.T) {
	fake := cudatest.NewDriver()
	devs := cuda.NewDevices(fake)
	r, err := devs.NewRing(0, 4, 10000)
	if err != nil {
		t.Fatal(err)
	}
	if r.Device() != 0 || r.DeviceBytes() != 4*r.Stride() || r.StagingBytes() != 4*r.Stride() {
		t.Fatalf("device %d device bytes %d staging bytes %d", r.Device(), r.DeviceBytes(), r.StagingBytes())
	}
	free0, total, err := r.MemInfo()
	if err != nil || total != cudatest.DeviceBytes || total-free0 != uint64(r.DeviceBytes()) {
		t.Fatalf("MemInfo: free %d total %d err %v; want the ring's %d bytes used", free0, total, err, r.DeviceBytes())
	}
	h := r.IPCHandle(r.Device())
	if len(h) != cuda.IPCHandleSize {
		t.Fatalf("IPC handle is %d bytes, want %d", len(h), cuda.IPCHandleSize)
	}
	whole, err := fake.OpenIPC(h)
	if err != nil || len(whole) != r.DeviceBytes() {
		t.Fatalf("IPC handle maps to %d bytes (%v), want the whole %d-byte allocation", len(whole), err, r.DeviceBytes())
	}
	copy(r.Slot(2), bytes.Repeat([]byte{7}, r.SlotBytes()))
	dev := whole[2*r.Stride() : 2*r.Stride()+r.SlotBytes()]
	if bytes.IndexByte(dev, 7) >= 0 {
		t.Fatal("device slot changed before Commit")
	}
	if err := r.Commit(2); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dev, r.Slot(2)) {
		t.Fatal("device slot does not hold the staged bytes after Commit")
	}
	if bytes.IndexByte(whole[:2*r.Stride()], 7) >= 0 || bytes.IndexByte(whole[3*r.Stride():], 7) >= 0 {
		t.Fatal("Commit(2) wrote outside slot 2")
	}
	c := fake.Counts()
	if c.PageableCopies != 0 || c.CopiedBytes != uint64(r.SlotBytes()) {
		t.Fatalf("copies: %d from pageable memory, %d bytes; want 0 and %d", c.PageableCopies, c.CopiedBytes, r.SlotBytes())
	}
	if n, b, _ := r.CommitStats(); n != 1 || b != uint64(r.SlotBytes()) {
		t.Fatalf("CommitStats %d commits %d bytes", n, b)
	}
	for _, i := range []int{-1, 4} {
		if err := r.Commit(i); err == nil {
			t.Errorf("Commit(%d) of a 4-slot ring succeeded", i)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if c := fake.Counts(); c.DeviceAllocs+c.HostAllocs+c.Streams+c.Events+c.Contexts != 0 || devs.Contexts() != 0 {
		t.Fatalf("after Close the fake holds %+v, %d contexts retained", c, devs.Contexts())
	}
	if err := r.Commit(0); !errors.Is(err, cuda.ErrRingClosed) {
		t.Fatalf("Commit after Close: %v, want cuda.ErrRingClosed", err)
	}
	if _, err := fake.OpenIPC(h); err == nil {
		t.Fatal("IPC handle still opens after Close")
	}
}

// TestPrimaryContextShared checks that rings on one GPU share one retained
// primary context, released with the last ring.
func TestPrimaryContextShared(t *testing.T) {
	fake := cudatest.NewDriver()
	devs := cuda.NewDevices(fake)
	var rings []*cuda.DeviceRing
	for _, dev := range []int{1, 1, 0, 1} {
		r, err := devs.NewRing(dev, 2, 4096)
		if err != nil {
			t.Fatal(err)
		}
		rings = append(rings, r)
	}
	if c := fake.Counts(); c.PrimaryRetains != 2 || c.Contexts != 2 || devs.Contexts() != 2 {
		t.Fatalf("4 rings on 2 GPUs: %d retains, %d held, %d in cuda.Devices; want 2", c.PrimaryRetains, c.Contexts, devs.Contexts())
	}
	for i, r := range rings {
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		want := []int{2, 2, 1, 0}[i]
		if got := fake.Counts().Contexts; got != want {
			t.Fatalf("after closing %d rings %d contexts held, want %d", i+1, got, want)
		}
	}
	if _, err := devs.NewRing(2, 2, 4096); !errors.Is(err, cuda.ErrNoSuchDevice) || !strings.Contains(err.Error(), "GPU 2") {
		t.Fatalf("ring on GPU 2 of 2: %v, want cuda.ErrNoSuchDevice naming GPU 2", err)
	}
}

// TestDeviceRingFailures injects a failure into each driver call the ring
// makes: the error names the call and the CUDA result, and nothing leaks.
func TestDeviceRingFailures(t *testing.T) {
	type step struct {
		call  string
		after int // calls that succeed first
	}
	openSteps := []step{
		{"cuDeviceGetCount", 0}, {"cuDeviceGet", 0}, {"cuDevicePrimaryCtxRetain", 0},
		{"cuMemAlloc_v2", 0}, {"cuIpcGetMemHandle", 0}, {"cuMemHostAlloc", 0},
		{"cuStreamCreate", 0}, {"cuEventCreate", 0}, {"cuEventCreate", 2},
	}
	for _, s := range openSteps {
		for _, res := range []cuda.Result{cuda.ErrOutOfMemory, cuda.ErrNotPermitted} {
			fake := cudatest.NewDriver()
			devs := cuda.NewDevices(fake)
			fake.FailAfter(s.call, s.after, res)
			r, err := devs.NewRing(0, 3, 5000)
			if err == nil {
				r.Close()
				t.Fatalf("%s failing with %s: NewRing succeeded", s.call, res.Name())
			}
			cuda.CheckError(t, err, s.call, res)
			checkNothingHeld(t, fake, devs, "NewRing with "+s.call+" failing")
		}
	}
	for _, call := range []string{"cuMemcpyHtoDAsync_v2", "cuEventRecord", "cuEventQuery", "cuEventSynchronize"} {
		fake := cudatest.NewDriver()
		devs := cuda.NewDevices(fake)
		r, err := devs.NewRing(0, 3, 5000)
		if err != nil {
			t.Fatal(err)
		}
		if call == "cuEventSynchronize" {
			fake.SetPendingQueries(1 << 30) // a copy that outlasts the polling: Commit sleeps on it
		}
		fake.FailNext(call, cuda.ErrIllegalAddress)
		err = r.Commit(1)
		cuda.CheckError(t, err, call, cuda.ErrIllegalAddress)
		fake.SetPendingQueries(0)
		if err := r.Commit(1); err != nil {
			t.Fatalf("Commit after a failed one: %v", err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		checkNothingHeld(t, fake, devs, "Commit with "+call+" failing")
	}
	// A failing free is reported, and everything else is still freed.
	for _, call := range []string{"cuEventDestroy_v2", "cuStreamDestroy_v2", "cuMemFreeHost", "cuMemFree_v2", "cuDevicePrimaryCtxRelease_v2"} {
		fake := cudatest.NewDriver()
		devs := cuda.NewDevices(fake)
		r, err := devs.NewRing(0, 3, 5000)
		if err != nil {
			t.Fatal(err)
		}
		fake.FailNext(call, cuda.ErrInvalidContext)
		cuda.CheckError(t, r.Close(), call, cuda.ErrInvalidContext)
		c := fake.Counts()
		leaked := map[string]int{"cuEventDestroy_v2": c.Events, "cuStreamDestroy_v2": c.Streams, "cuMemFreeHost": c.HostAllocs,
			"cuMemFree_v2": c.DeviceAllocs, "cuDevicePrimaryCtxRelease_v2": c.Contexts}
		total := c.Events + c.Streams + c.HostAllocs + c.DeviceAllocs + c.Contexts
		if leaked[call] != 1 || total != 1 {
			t.Errorf("Close with %s failing left %+v; want only what that call frees", call, c)
		}
	}
}

func checkNothingHeld(t *testing.T, fake *cudatest.Driver, devs *cuda.Devices, what string) {
	t.Helper()
	if c := fake.Counts(); c.DeviceAllocs+c.HostAllocs+c.Streams+c.Events+c.Contexts != 0 || devs.Contexts() != 0 {
		t.Errorf("%s: fake still holds %+v, %d contexts in cuda.Devices", what, c, devs.Contexts())
	}
}

// A copy that is queued but not waited for must not show on the device:
// the fake models asynchrony, so a Commit that forgot to wait would fail.
func TestFakeCopyIsAsync(t *testing.T) {
	fake := cudatest.NewDriver()
	ctx, _ := fake.RetainPrimaryContext(0)
	defer fake.ReleasePrimaryContext(0)
	p, _ := fake.MemAlloc(ctx, 4)
	s, _ := fake.StreamCreate(ctx)
	e, _ := fake.EventCreate(ctx)
	src, _ := fake.HostAlloc(ctx, 4)
	copy(src, "abcd")
	if err := fake.MemcpyHtoDAsync(ctx, p, src, s); err != nil {
		t.Fatal(err)
	}
	if string(fake.DeviceMemory(p, 4)) == "abcd" {
		t.Fatal("copy visible before any wait")
	}
	fake.EventRecord(ctx, e, s)
	if done, err := fake.EventQuery(ctx, e); !done || err != nil || string(fake.DeviceMemory(p, 4)) != "abcd" {
		t.Fatalf("after the event completed the device holds %q (%v)", fake.DeviceMemory(p, 4), err)
	}
	if err := fake.MemcpyHtoDAsync(ctx, p+2, src, s); err == nil {
		t.Fatal("copy past the end of the allocation accepted")
	}
	if err := fake.MemcpyHtoDAsync(ctx, p, []byte("wxyz"), s); err != nil || fake.Counts().PageableCopies != 1 {
		t.Fatalf("copy from Go memory: %v, %d pageable", err, fake.Counts().PageableCopies)
	}
	fake.EventDestroy(ctx, e)
	fake.StreamDestroy(ctx, s)
	fake.HostFree(ctx, src)
	fake.MemFree(ctx, p)
}

// TestCommitPollsThenSleeps: Commit polls the copy's event and returns as
// soon as it completes; a copy still in flight after the polling budget is
// waited for by sleeping on the event. Either way the slot is on the device.
func TestCommitPollsThenSleeps(t *testing.T) {
	// A copy that completes after 50 polls is given a slot of 32 MiB, whose
	// polling budget (6.8 ms) a loaded machine's scheduler does not eat up
	// before 50 polls of the stand-in driver (4 KiB's 101 us once did).
	for _, tc := range []struct {
		pending   int
		slot      int
		wantSyncs int
	}{{0, 4096, 0}, {50, 32 << 20, 0}, {1 << 30, 4096, 1}} {
		fake := cudatest.NewDriver()
		devs := cuda.NewDevices(fake)
		r, err := devs.NewRing(0, 2, tc.slot)
		if err != nil {
			t.Fatal(err)
		}
		fake.SetPendingQueries(tc.pending)
		copy(r.Slot(1), bytes.Repeat([]byte{9}, r.SlotBytes()))
		start := time.Now()
		if err := r.Commit(1); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		if got := fake.Counts().Syncs; got != tc.wantSyncs {
			t.Errorf("%d pending queries: %d sleeping waits, want %d", tc.pending, got, tc.wantSyncs)
		}
		if tc.wantSyncs == 1 && took < cuda.SpinBudget(r.SlotBytes()) {
			t.Errorf("slept on the event after %v, before the %v polling budget", took, cuda.SpinBudget(r.SlotBytes()))
		}
		whole, err := fake.OpenIPC(r.IPCHandle(r.Device()))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(whole[r.Stride():r.Stride()+r.SlotBytes()], r.Slot(1)) {
			t.Errorf("%d pending queries: the device slot does not hold the batch after Commit", tc.pending)
		}
		r.Close()
	}
	if b := cuda.SpinBudget(1 << 20); b < 300*time.Microsecond || b > 320*time.Microsecond {
		t.Errorf("polling budget for 1 MiB is %v, want 100 us + 1 MiB at 5 GB/s", b)
	}
}

// TestDeviceRingOnTwoGPUs: a ring given a second GPU holds there the batches
// committed before (copied when it was added) and after, on both GPUs; a GPU
// it cannot add leaves nothing allocated and the ring serving; Close frees
// both GPUs' memory and contexts.
func TestDeviceRingOnTwoGPUs(t *testing.T) {
	fake := cudatest.NewDriver()
	devs := cuda.NewDevices(fake)
	r, err := devs.NewRing(0, 3, 5000)
	if err != nil {
		t.Fatal(err)
	}
	fill := func(i int, b byte) {
		copy(r.Slot(i), bytes.Repeat([]byte{b}, r.SlotBytes()))
		if err := r.Commit(i); err != nil {
			t.Fatal(err)
		}
	}
	slot := func(device, i int) []byte {
		mem, err := fake.OpenIPC(r.IPCHandle(device))
		if err != nil {
			t.Fatalf("GPU %d: %v", device, err)
		}
		return mem[i*r.Stride() : i*r.Stride()+r.SlotBytes()]
	}
	fill(0, 1)
	fill(1, 2)

	fake.FailNext("cuMemAlloc_v2", cuda.ErrOutOfMemory)
	if added, err := r.AddDevice(1); added || !errors.Is(err, cuda.ErrOutOfMemory) || !strings.Contains(err.Error(), "GPU 1") {
		t.Fatalf("AddDevice with no memory on GPU 1: %v %v", added, err)
	}
	if c := fake.Counts(); c.DeviceAllocs != 1 || c.Contexts != 1 || c.Streams != 1 || r.IPCHandle(1) != nil {
		t.Fatalf("a failed AddDevice left %+v", c)
	}
	if added, err := r.AddDevice(1); !added || err != nil {
		t.Fatalf("AddDevice(1): %v %v", added, err)
	}
	for _, d := range []int{0, 1} {
		if added, err := r.AddDevice(d); added || err != nil {
			t.Fatalf("AddDevice(%d) of a GPU the ring has: %v %v", d, added, err)
		}
	}
	if got := r.Devices(); len(got) != 2 || got[0] != 0 || got[1] != 1 || r.Device() != 0 {
		t.Fatalf("cuda.Devices %v Device %d", got, r.Device())
	}
	if r.DeviceBytes() != 2*r.SlotsBytes() || fake.Counts().Contexts != 2 {
		t.Fatalf("two GPUs: %d device bytes, %+v", r.DeviceBytes(), fake.Counts())
	}
	for i, b := range []byte{1, 2} {
		if !bytes.Equal(slot(1, i), slot(0, i)) || slot(1, i)[0] != b {
			t.Fatalf("slot %d committed before GPU 1 was added is not on it", i)
		}
	}
	fill(2, 3)
	fill(0, 4)
	for _, d := range []int{0, 1} {
		if slot(d, 2)[0] != 3 || slot(d, 0)[0] != 4 || !bytes.Equal(slot(d, 2), r.Slot(2)) {
			t.Fatalf("GPU %d misses a batch committed after the second GPU was added", d)
		}
	}
	if r.IPCHandle(5) != nil {
		t.Fatal("IPC handle for a GPU the ring is not on")
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if c := fake.Counts(); c.DeviceAllocs+c.HostAllocs+c.Streams+c.Events+c.Contexts != 0 || devs.Contexts() != 0 {
		t.Fatalf("after Close the fake holds %+v, %d contexts retained", c, devs.Contexts())
	}
	if _, err := r.AddDevice(1); !errors.Is(err, cuda.ErrRingClosed) {
		t.Fatalf("AddDevice after Close: %v", err)
	}
	if _, _, err := r.MemInfo(); !errors.Is(err, cuda.ErrRingClosed) || r.Device() != 0 {
		t.Fatalf("after Close: MemInfo %v, Device %d", err, r.Device())
	}
}

// TestAddDeviceWhileTheProducerWrites: a consumer joining on another GPU
// while the producer writes a slot gets every committed slot copied there,
// and the slot being written once its Commit comes; the join never reads
// the slot being written (the race detector flags it if it does).
func TestAddDeviceWhileTheProducerWrites(t *testing.T) {
	fake := cudatest.NewDriver()
	r, err := cuda.NewDevices(fake).NewRing(0, 3, 5000)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i, b := range []byte{1, 2} {
		copy(r.Slot(i), bytes.Repeat([]byte{b}, r.SlotBytes()))
		if err := r.Commit(i); err != nil {
			t.Fatal(err)
		}
	}
	busy := r.Slot(2) // the producer starts on slot 2 ...
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		for k := range busy { // ... and writes it while the consumer joins
			busy[k] = 3
		}
	}()
	if added, err := r.AddDevice(1); !added || err != nil {
		t.Fatalf("AddDevice: %v %v", added, err)
	}
	<-wrote
	if err := r.Commit(2); err != nil {
		t.Fatal(err)
	}
	mem, err := fake.OpenIPC(r.IPCHandle(1))
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range []byte{1, 2, 3} {
		if got := fake.ReadIPC(mem, i*r.Stride(), r.SlotBytes()); !bytes.Equal(got, bytes.Repeat([]byte{b}, r.SlotBytes())) {
			t.Fatalf("slot %d on the joined GPU does not hold its batch", i)
		}
	}
}
