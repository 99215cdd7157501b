package server_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	pb "github.com/dataloaderd/dataloaderd/api/proto/dataloader/v1"
	"github.com/dataloaderd/dataloaderd/internal/cuda"
	"github.com/dataloaderd/dataloaderd/internal/cuda/cudatest"
	"github.com/dataloaderd/dataloaderd/internal/session"
)

// TestCUDAGroupOnTwoGPUs: the two consumers of a tensor-parallel group on
// GPUs 0 and 1 share one cuda session; each reads, through the IPC handle of
// its own GPU, the batches an inline session of the same job sends, those
// produced before it joined included. Closing frees both GPUs' memory.
func TestCUDAGroupOnTwoGPUs(t *testing.T) {
	fake := cudatest.NewDriver()
	d := startDaemon(t, session.Config{OpenCUDA: func() (cuda.Driver, error) { return fake, nil }})
	ctx := ctxT(t)
	cfg := d.config(t)
	const steps = 6
	open := func(tr pb.Transport, job string, device, consumers uint32) (*pb.OpenSessionResponse, grpc.BidiStreamingClient[pb.BatchesRequest, pb.Batch]) {
		o, err := d.client.OpenSession(ctx, &pb.OpenSessionRequest{Job: job, Config: cfg, DpRank: 0, DpSize: 1, Transport: tr,
			Device: device, Consumers: consumers, Slots: 2})
		if err != nil {
			t.Fatal(err)
		}
		return o, d.attach(t, ctx, o, false)
	}
	io, ibs := open(pb.Transport_TRANSPORT_INLINE, "i", 0, 1)
	var want [][]byte
	for range steps {
		b, err := ibs.Recv()
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, b.GetData())
		release(ibs, b)
	}
	d.client.CloseSession(ctx, &pb.CloseSessionRequest{SessionId: io.GetSessionId()})

	o0, bs0 := open(pb.Transport_TRANSPORT_CUDA, "tp", 0, 2)
	// Let the producer fill the ring on GPU 0 before the second consumer joins.
	time.Sleep(50 * time.Millisecond)
	o1, bs1 := open(pb.Transport_TRANSPORT_CUDA, "tp", 1, 2)
	if o0.GetSessionId() != o1.GetSessionId() || o1.GetConsumer() != 1 {
		t.Fatalf("the second consumer did not join the group's session: %v %v", o0, o1)
	}
	if o0.GetRing().GetDevice() != 0 || o1.GetRing().GetDevice() != 1 || string(o0.GetRing().GetIpcHandle()) == string(o1.GetRing().GetIpcHandle()) {
		t.Fatalf("consumers were not given their own GPU's slots: %v / %v", o0.GetRing(), o1.GetRing())
	}
	if c := fake.Counts(); c.Contexts != 2 || c.DeviceAllocs != 2 {
		t.Fatalf("a ring on two GPUs holds %+v", c)
	}
	group := []*pb.OpenSessionResponse{o0, o1}
	streams := []grpc.BidiStreamingClient[pb.BatchesRequest, pb.Batch]{bs0, bs1}
	var mems [][]byte
	for _, o := range group {
		mem, err := fake.OpenIPC(o.GetRing().GetIpcHandle())
		if err != nil {
			t.Fatal(err)
		}
		mems = append(mems, mem)
	}
	for i := range steps {
		for c, o := range group {
			b, err := streams[c].Recv()
			if err != nil {
				t.Fatal(err)
			}
			off, n := int(b.GetSlot())*int(o.GetRing().GetSlotStride()), int(b.GetLines())*int(o.GetLineTokens())*4
			if string(mems[c][off:off+n]) != string(want[i]) {
				t.Fatalf("consumer %d (GPU %d): batch %d differs from inline", c, o.GetRing().GetDevice(), i+1)
			}
			release(streams[c], b)
		}
	}
	for _, o := range []*pb.OpenSessionResponse{o0, o1} {
		if _, err := d.client.CloseSession(ctx, &pb.CloseSessionRequest{SessionId: o.GetSessionId(), Consumer: o.GetConsumer()}); err != nil {
			t.Fatal(err)
		}
	}
	waitSessions(t, d, 0)
	if c := fake.Counts(); c.DeviceAllocs+c.HostAllocs+c.Streams+c.Events+c.Contexts != 0 {
		t.Fatalf("after the group closed the fake driver holds %+v", c)
	}
}

// TestCUDAJoinsThatFail: a join refused (duplicate session) allocates nothing
// on the GPU it came from; a consumer on a GPU the driver does not have is
// refused with InvalidArgument naming it; dataloaderd_device_ring_bytes
// counts each ring once per GPU and is back to 0 once every session went,
// reclaimed ones included.
func TestCUDAJoinsThatFail(t *testing.T) {
	fake := cudatest.NewDriver()
	d := startDaemon(t, session.Config{OpenCUDA: func() (cuda.Driver, error) { return fake, nil }, AttachWithin: 200 * time.Millisecond})
	ctx := ctxT(t)
	go d.sessions.Reap(ctx)
	cfg := d.config(t)
	gauge := func() float64 { return d.metric(t, "dataloaderd_device_ring_bytes") }
	open := func(job string, device, consumers uint32) (*pb.OpenSessionResponse, error) {
		return d.client.OpenSession(ctx, &pb.OpenSessionRequest{Job: job, Config: cfg, DpSize: 1, Transport: pb.Transport_TRANSPORT_CUDA,
			Device: device, Consumers: consumers, Slots: 2})
	}
	o, err := open("one", 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	ringBytes := float64(o.GetRing().GetSlots()) * float64(o.GetRing().GetSlotStride())
	if _, err := open("one", 1, 1); code(err) != codes.AlreadyExists {
		t.Fatalf("a second open of a one-consumer session from GPU 1: %v", err)
	}
	if c := fake.Counts(); c.DeviceAllocs != 1 || c.Contexts != 1 || gauge() != ringBytes {
		t.Fatalf("a refused join from GPU 1 allocated: %+v, gauge %v for a %v-byte ring", c, gauge(), ringBytes)
	}
	if _, err := open("group", 0, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := open("group", 1, 2); err != nil {
		t.Fatal(err)
	}
	if gauge() != 3*ringBytes {
		t.Fatalf("gauge %v with rings on GPU 0, and on GPUs 0 and 1, of %v bytes each", gauge(), ringBytes)
	}
	if _, err := open("bad", 0, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := open("bad", 7, 2); code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "GPU 7") {
		t.Fatalf("a consumer on GPU 7 of a 2-GPU driver: %v", err)
	}
	if _, err := d.client.CloseSession(ctx, &pb.CloseSessionRequest{SessionId: o.GetSessionId()}); err != nil {
		t.Fatal(err)
	}
	waitSessions(t, d, 0) // the others never attached: reclaimed
	if c := fake.Counts(); c.DeviceAllocs+c.HostAllocs+c.Streams+c.Events+c.Contexts != 0 || gauge() != 0 {
		t.Fatalf("after every session went the fake driver holds %+v and the gauge reads %v", c, gauge())
	}
}

// TestCUDATransportOnFakeDriver: a cuda session on the fake driver serves,
// through the device slots its IPC handle maps, the bytes an inline session
// of the same job sends; closing it frees every device and pinned buffer.
// Without a driver the transport is refused with Unimplemented, naming the
// cause and the transports that work.
func TestCUDATransportOnFakeDriver(t *testing.T) {
	fake := cudatest.NewDriver()
	d := startDaemon(t, session.Config{OpenCUDA: func() (cuda.Driver, error) { return fake, nil }})
	ctx := ctxT(t)
	cfg := d.config(t)
	read := func(tr pb.Transport, job string, device uint32, control bool) ([][]byte, *pb.OpenSessionResponse) {
		return d.readSix(t, ctx, fake, &pb.OpenSessionRequest{Job: job, Config: cfg, DpRank: 0, DpSize: 1, Transport: tr, Device: device, Slots: 2}, control)
	}
	want, _ := read(pb.Transport_TRANSPORT_INLINE, "i", 0, false)
	got, o := read(pb.Transport_TRANSPORT_CUDA, "c", 1, false)
	if o.GetTransport() != pb.Transport_TRANSPORT_CUDA || o.GetRing().GetDevice() != 1 || len(o.GetRing().GetIpcHandle()) != 64 || o.GetRing().GetPath() != "" {
		t.Fatalf("cuda ring described as %v", o.GetRing())
	}
	fast, fo := read(pb.Transport_TRANSPORT_CUDA, "f", 0, true)
	for i := range want {
		if string(got[i]) != string(want[i]) {
			t.Fatalf("batch %d through the device slots differs from inline", i+1)
		}
		if string(fast[i]) != string(want[i]) {
			t.Fatalf("batch %d announced in the control block differs from inline", i+1)
		}
	}
	waitSessions(t, d, 0)
	if _, err := os.Stat(fo.GetRing().GetControlPath()); !os.IsNotExist(err) {
		t.Fatalf("control file %s left after close: %v", fo.GetRing().GetControlPath(), err)
	}
	// Without a shm directory to put the control block in, a cuda session
	// still serves, by messages.
	if err := os.Remove(d.shm); err != nil {
		t.Fatal(err)
	}
	slow, so := read(pb.Transport_TRANSPORT_CUDA, "noshm", 0, false)
	if err := os.Mkdir(d.shm, 0o700); err != nil {
		t.Fatal(err)
	}
	if so.GetRing().GetControlPath() != "" || so.GetRing().GetControlBytes() != 0 {
		t.Fatalf("a control block announced without a shm directory: %v", so.GetRing())
	}
	for i := range want {
		if string(slow[i]) != string(want[i]) {
			t.Fatalf("batch %d by messages without a control block differs from inline", i+1)
		}
	}
	waitSessions(t, d, 0)
	// Every batch of the three cuda sessions went through a timed device copy.
	if n := d.metric(t, "dataloaderd_device_copy_seconds"); n < 3*6 {
		t.Fatalf("dataloaderd_device_copy_seconds counted %v copies, want at least the 18 batches read", n)
	}
	if c := fake.Counts(); c.DeviceAllocs+c.HostAllocs+c.Streams+c.Events+c.Contexts != 0 || c.PageableCopies != 0 {
		t.Fatalf("after close the fake driver holds %+v", c)
	}

	none := startDaemon(t, session.Config{OpenCUDA: func() (cuda.Driver, error) {
		return nil, fmt.Errorf("%w: libcuda.so.1: cannot open shared object file", cuda.ErrNoDriver)
	}})
	_, err := none.client.OpenSession(ctx, &pb.OpenSessionRequest{Job: "n", Config: none.config(t), DpSize: 1, Transport: pb.Transport_TRANSPORT_CUDA})
	if code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "libcuda.so.1") || !strings.Contains(err.Error(), "shm and inline") {
		t.Fatalf("cuda without a driver: %v", err)
	}
	fake.FailNext("cuMemAlloc_v2", cuda.ErrOutOfMemory)
	_, err = d.client.OpenSession(ctx, &pb.OpenSessionRequest{Job: "oom", Config: cfg, DpSize: 1, Transport: pb.Transport_TRANSPORT_CUDA})
	if code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "CUDA_ERROR_OUT_OF_MEMORY") {
		t.Fatalf("cuda ring out of device memory: %v", err)
	}
	if c := fake.Counts(); c.DeviceAllocs+c.HostAllocs+c.Contexts != 0 {
		t.Fatalf("a failed ring left %+v", c)
	}
}

// readSix opens a session, takes 6 batches of it (with control, the cuda
// ones from the control block instead of messages: the bytes through the
// device slots its IPC handle maps) and closes it.
func (d *daemon) readSix(t *testing.T, ctx context.Context, fake *cudatest.Driver, req *pb.OpenSessionRequest, control bool) ([][]byte, *pb.OpenSessionResponse) {
	t.Helper()
	o, err := d.client.OpenSession(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	bs := d.attach(t, ctx, o, control)
	var mem []byte
	if req.GetTransport() == pb.Transport_TRANSPORT_CUDA {
		if mem, err = fake.OpenIPC(o.GetRing().GetIpcHandle()); err != nil {
			t.Fatal(err)
		}
	}
	var out [][]byte
	if control {
		cb := mapControl(t, o.GetRing())
		for step := uint64(1); step <= 6; step++ {
			slot, lines := cb.next(step)
			off, n := slot*int(o.GetRing().GetSlotStride()), lines*int(o.GetLineTokens())*4
			out = append(out, fake.ReadIPC(mem, off, n))
			cb.release(o.GetConsumer(), step)
		}
	} else {
		for i := 0; i < 6; i++ {
			b, err := bs.Recv()
			if err != nil {
				t.Fatal(err)
			}
			n := int(b.GetLines()) * int(o.GetLineTokens()) * 4
			if req.GetTransport() == pb.Transport_TRANSPORT_CUDA {
				off := int(b.GetSlot()) * int(o.GetRing().GetSlotStride())
				if len(b.GetData()) != 0 {
					t.Fatal("cuda batch carried inline data")
				}
				out = append(out, append([]byte(nil), mem[off:off+n]...))
			} else {
				out = append(out, b.GetData())
			}
			release(bs, b)
		}
	}
	if _, err := d.client.CloseSession(ctx, &pb.CloseSessionRequest{SessionId: o.GetSessionId()}); err != nil {
		t.Fatal(err)
	}
	return out, o
}
