package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	pb "github.com/dataloaderd/dataloaderd/api/proto/dataloader/v1"
	"github.com/dataloaderd/dataloaderd/internal/cuda"
	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// daemon is a real server on a unix socket in a temp dir, and a client.
type daemon struct {
	srv    *Server
	client pb.LoaderClient
	conn   *grpc.ClientConn
	shm    string
	data   string
}

func startDaemon(t *testing.T, cfg Config) *daemon {
	t.Helper()
	dir := t.TempDir()
	cfg.ShmDir = filepath.Join(dir, "shm")
	os.Mkdir(cfg.ShmDir, 0o700)
	cfg.Registry = prometheus.NewRegistry()
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, cleanup, err := Listen(filepath.Join(dir, "d.sock"))
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	srv.Register(g)
	go g.Serve(lis)
	srv.SetServing()
	conn, err := grpc.NewClient("unix://"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Shutdown()
		g.Stop()
		cleanup()
		if left, _ := os.ReadDir(cfg.ShmDir); len(left) > 0 {
			t.Errorf("ring files left after shutdown: %v", left)
		}
	})
	data := filepath.Join(dir, "data")
	os.Mkdir(data, 0o755)
	return &daemon{srv: srv, client: pb.NewLoaderClient(conn), conn: conn, shm: cfg.ShmDir, data: data}
}

func (d *daemon) config(t *testing.T) *pb.JobConfig {
	docs, _ := testcorpus.UniqueDocs(rand.New(rand.NewSource(1)), 200, 50, 1)
	prefix := testcorpus.Megatron(t, d.data, "web", docs)
	return &pb.JobConfig{SeqLen: 15, BatchSize: 4, Seed: 9, LogicalShards: 8, EosId: 0, BosId: -1, PadId: 0,
		Datasets: []*pb.Dataset{{Name: "web", Path: prefix, Format: "megatron", Weight: 1}}}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func code(err error) codes.Code { return status.Code(err) }

// waitSessions polls until the server has n sessions.
func waitSessions(t *testing.T, s *Server, n int) {
	t.Helper()
	for i := 0; i < 200 && s.Sessions() != n; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if s.Sessions() != n {
		t.Fatalf("%d sessions, want %d", s.Sessions(), n)
	}
}

func TestHealth(t *testing.T) {
	d := startDaemon(t, Config{})
	resp, err := healthpb.NewHealthClient(d.conn).Check(ctxT(t), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", resp, err)
	}
}

func TestShmSessionSaveAndReclaim(t *testing.T) {
	d := startDaemon(t, Config{})
	ctx := ctxT(t)
	cfg := d.config(t)
	open, err := d.client.OpenSession(ctx, &pb.OpenSessionRequest{Job: "j", Config: cfg, DpRank: 1, DpSize: 2, Slots: 3})
	if err != nil {
		t.Fatal(err)
	}
	ring, err := os.ReadFile(open.GetRing().GetPath())
	if err != nil {
		t.Fatalf("ring file: %v", err)
	}
	if fi, _ := os.Stat(open.GetRing().GetPath()); fi.Mode().Perm() != 0o600 {
		t.Fatalf("ring mode %v", fi.Mode().Perm())
	}
	_ = ring
	if _, err := d.client.OpenSession(ctx, &pb.OpenSessionRequest{Job: "j", Config: cfg, DpRank: 1, DpSize: 2}); code(err) != codes.AlreadyExists ||
		!strings.Contains(err.Error(), "duplicate session") {
		t.Fatalf("duplicate session: %v", err)
	}
	sctx, cancel := context.WithCancel(ctx)
	bs, err := d.client.Batches(sctx)
	if err != nil {
		t.Fatal(err)
	}
	bs.Send(&pb.BatchesRequest{Kind: &pb.BatchesRequest_Attach{Attach: &pb.Attach{SessionId: open.GetSessionId()}}})
	stride := int(open.GetRing().GetSlotStride())
	line := int(open.GetLineTokens())
	for step := uint64(1); step <= 5; step++ {
		b, err := bs.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if b.GetStep() != step || b.GetLines() != 4 {
			t.Fatalf("batch %+v, want step %d of 4 lines", b, step)
		}
		mem, _ := os.ReadFile(open.GetRing().GetPath())
		tok := mem[int(b.GetSlot())*stride : int(b.GetSlot())*stride+4*4*line]
		nonzero := false
		for i := 0; i < len(tok); i += 4 {
			nonzero = nonzero || binary.LittleEndian.Uint32(tok[i:]) != 0
		}
		if !nonzero {
			t.Fatalf("slot %d holds no tokens", b.GetSlot())
		}
		bs.Send(&pb.BatchesRequest{Kind: &pb.BatchesRequest_Release{Release: &pb.Release{Slot: b.GetSlot(), Step: b.GetStep(), WaitNs: 1000}}})
	}
	folder := t.TempDir()
	saved, err := d.client.SaveState(ctx, &pb.SaveStateRequest{SessionId: open.GetSessionId(), Step: 5, Folder: folder})
	if err != nil {
		t.Fatal(err)
	}
	if saved.GetPath() != filepath.Join(folder, "dataloader", "rank-1-of-2.json") {
		t.Fatalf("saved to %s", saved.GetPath())
	}
	// A release of a slot that does not hold that step ends the stream.
	bs.Send(&pb.BatchesRequest{Kind: &pb.BatchesRequest_Release{Release: &pb.Release{Slot: 2, Step: 999}}})
	for {
		if _, err = bs.Recv(); err != nil {
			break
		}
	}
	if code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "unknown slot") {
		t.Fatalf("unknown slot released: %v", err)
	}
	cancel()
	// The stream broke without CloseSession: the session and ring are reclaimed.
	waitSessions(t, d.srv, 0)
	if _, err := os.Stat(open.GetRing().GetPath()); !os.IsNotExist(err) {
		t.Fatalf("ring file still there: %v", err)
	}
}

func TestInlineAndConsumers(t *testing.T) {
	d := startDaemon(t, Config{})
	ctx := ctxT(t)
	cfg := d.config(t)
	req := &pb.OpenSessionRequest{Job: "tp", Config: cfg, DpRank: 0, DpSize: 1, Consumers: 2, Transport: pb.Transport_TRANSPORT_INLINE}
	var opens []*pb.OpenSessionResponse
	for i := 0; i < 2; i++ {
		o, err := d.client.OpenSession(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		opens = append(opens, o)
	}
	if opens[0].GetSessionId() != opens[1].GetSessionId() || opens[1].GetConsumer() != 1 {
		t.Fatalf("second consumer did not join: %v %v", opens[0], opens[1])
	}
	if _, err := d.client.OpenSession(ctx, req); code(err) != codes.AlreadyExists || !strings.Contains(err.Error(), "2 consumers") {
		t.Fatalf("third consumer: %v", err)
	}
	var got [2][][]byte
	for c := 0; c < 2; c++ {
		bs, err := d.client.Batches(ctx)
		if err != nil {
			t.Fatal(err)
		}
		bs.Send(&pb.BatchesRequest{Kind: &pb.BatchesRequest_Attach{Attach: &pb.Attach{SessionId: opens[c].GetSessionId(), Consumer: uint32(c)}}})
		for i := 0; i < 3; i++ {
			b, err := bs.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if len(b.GetData()) != int(b.GetLines())*int(opens[c].GetLineTokens())*4 {
				t.Fatalf("inline batch of %d bytes for %d lines", len(b.GetData()), b.GetLines())
			}
			got[c] = append(got[c], b.GetData())
			bs.Send(&pb.BatchesRequest{Kind: &pb.BatchesRequest_Release{Release: &pb.Release{Slot: b.GetSlot(), Step: b.GetStep()}}})
		}
	}
	for i := range got[0] {
		if string(got[0][i]) != string(got[1][i]) {
			t.Fatalf("consumers got different batch %d", i+1)
		}
	}
	for c := 0; c < 2; c++ {
		if _, err := d.client.CloseSession(ctx, &pb.CloseSessionRequest{SessionId: opens[c].GetSessionId(), Consumer: uint32(c)}); err != nil {
			t.Fatal(err)
		}
	}
	waitSessions(t, d.srv, 0)
}

func TestOpenErrors(t *testing.T) {
	root := t.TempDir()
	d := startDaemon(t, Config{AllowRoots: []string{root}})
	ctx := ctxT(t)
	inRoot := func(c *pb.JobConfig) *pb.JobConfig {
		docs, _ := testcorpus.UniqueDocs(rand.New(rand.NewSource(2)), 50, 20, 1)
		c.Datasets[0].Path = testcorpus.Megatron(t, root, "web", docs)
		return c
	}
	cases := []struct {
		name string
		req  func(c *pb.JobConfig) *pb.OpenSessionRequest
		code codes.Code
		want string
	}{
		{"seq_len", func(c *pb.JobConfig) *pb.OpenSessionRequest {
			c.SeqLen = 0
			return &pb.OpenSessionRequest{Config: inRoot(c), DpSize: 1}
		}, codes.InvalidArgument, "seq_len"},
		{"dp_rank", func(c *pb.JobConfig) *pb.OpenSessionRequest {
			return &pb.OpenSessionRequest{Config: inRoot(c), DpRank: 2, DpSize: 2}
		}, codes.InvalidArgument, "dp_rank 2 is out of range"},
		{"logical_shards", func(c *pb.JobConfig) *pb.OpenSessionRequest {
			c.LogicalShards = 2
			return &pb.OpenSessionRequest{Config: inRoot(c), DpSize: 4}
		}, codes.InvalidArgument, "logical_shards (2) must be at least dp_size (4)"},
		{"outside roots", func(c *pb.JobConfig) *pb.OpenSessionRequest {
			return &pb.OpenSessionRequest{Config: c, DpSize: 1}
		}, codes.PermissionDenied, "not under any --allow-root"},
		{"missing path", func(c *pb.JobConfig) *pb.OpenSessionRequest {
			c.Datasets[0].Path = filepath.Join(root, "nothing")
			return &pb.OpenSessionRequest{Config: c, DpSize: 1}
		}, codes.InvalidArgument, "nothing"},
		{"weights", func(c *pb.JobConfig) *pb.OpenSessionRequest {
			c.Datasets[0].Weight = 0
			return &pb.OpenSessionRequest{Config: inRoot(c), DpSize: 1}
		}, codes.InvalidArgument, "weight"},
		{"resume from another corpus", func(c *pb.JobConfig) *pb.OpenSessionRequest {
			return &pb.OpenSessionRequest{Config: inRoot(c), DpSize: 1, ResumeFrom: root}
		}, codes.FailedPrecondition, "no dataloader/ directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := d.client.OpenSession(ctx, c.req(d.config(t)))
			if code(err) != c.code || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %v containing %q", err, c.code, c.want)
			}
		})
	}
	if d.srv.Sessions() != 0 {
		t.Fatalf("%d sessions after refused opens", d.srv.Sessions())
	}
}

func TestSocketPath(t *testing.T) {
	long := "/tmp/" + strings.Repeat("x", 120) + ".sock"
	if _, _, err := Listen(long); err == nil || !strings.Contains(err.Error(), "longer than the 107") {
		t.Fatalf("long socket path: %v", err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "s.sock")
	l, cleanup, err := Listen("unix://" + p)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode %v", fi.Mode().Perm())
	}
	// A live socket is not replaced.
	if _, _, err := Listen(p); err == nil || !strings.Contains(err.Error(), "another daemon") {
		t.Fatalf("listen on a live socket: %v", err)
	}
	l.Close()
	// A stale one (nothing answers) is.
	l2, cleanup2, err := Listen(p)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	cleanup2()
	cleanup()
	_ = l2
	if _, err := net.Dial("unix", p); err == nil {
		t.Fatal("socket still answers after cleanup")
	}
}

// TestCorpusShared: the ranks of one job share one opened corpus, closed
// with the last session.
func TestCorpusShared(t *testing.T) {
	d := startDaemon(t, Config{})
	ctx := ctxT(t)
	cfg := d.config(t)
	var ids []string
	for r := uint32(0); r < 2; r++ {
		o, err := d.client.OpenSession(ctx, &pb.OpenSessionRequest{Job: "j", Config: cfg, DpRank: r, DpSize: 2})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, o.GetSessionId())
	}
	d.srv.corpora.mu.Lock()
	n, refs := len(d.srv.corpora.open), 0
	for _, sc := range d.srv.corpora.open {
		refs = sc.refs
	}
	d.srv.corpora.mu.Unlock()
	if n != 1 || refs != 2 {
		t.Fatalf("%d corpora open with %d refs, want 1 with 2", n, refs)
	}
	for _, id := range ids {
		if _, err := d.client.CloseSession(ctx, &pb.CloseSessionRequest{SessionId: id}); err != nil {
			t.Fatal(err)
		}
	}
	waitSessions(t, d.srv, 0)
	d.srv.corpora.mu.Lock()
	defer d.srv.corpora.mu.Unlock()
	if len(d.srv.corpora.open) != 0 {
		t.Fatalf("%d corpora still open after every session closed", len(d.srv.corpora.open))
	}
}

// TestCUDAGroupOnTwoGPUs: the two consumers of a tensor-parallel group on
// GPUs 0 and 1 share one cuda session; each reads, through the IPC handle of
// its own GPU, the batches an inline session of the same job sends, those
// produced before it joined included. Closing frees both GPUs' memory.
func TestCUDAGroupOnTwoGPUs(t *testing.T) {
	fake := cuda.NewFakeDriver()
	d := startDaemon(t, Config{OpenCUDA: func() (cuda.Driver, error) { return fake, nil }})
	ctx := ctxT(t)
	cfg := d.config(t)
	const steps = 6
	open := func(tr pb.Transport, job string, device, consumers uint32) (*pb.OpenSessionResponse, grpc.BidiStreamingClient[pb.BatchesRequest, pb.Batch]) {
		o, err := d.client.OpenSession(ctx, &pb.OpenSessionRequest{Job: job, Config: cfg, DpRank: 0, DpSize: 1, Transport: tr,
			Device: device, Consumers: consumers, Slots: 2})
		if err != nil {
			t.Fatal(err)
		}
		bs, err := d.client.Batches(ctx)
		if err != nil {
			t.Fatal(err)
		}
		bs.Send(&pb.BatchesRequest{Kind: &pb.BatchesRequest_Attach{Attach: &pb.Attach{SessionId: o.GetSessionId(), Consumer: o.GetConsumer()}}})
		return o, bs
	}
	io, ibs := open(pb.Transport_TRANSPORT_INLINE, "i", 0, 1)
	var want [][]byte
	for range steps {
		b, err := ibs.Recv()
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, b.GetData())
		ibs.Send(&pb.BatchesRequest{Kind: &pb.BatchesRequest_Release{Release: &pb.Release{Slot: b.GetSlot(), Step: b.GetStep()}}})
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
			streams[c].Send(&pb.BatchesRequest{Kind: &pb.BatchesRequest_Release{Release: &pb.Release{Slot: b.GetSlot(), Step: b.GetStep()}}})
		}
	}
	for _, o := range []*pb.OpenSessionResponse{o0, o1} {
		if _, err := d.client.CloseSession(ctx, &pb.CloseSessionRequest{SessionId: o.GetSessionId(), Consumer: o.GetConsumer()}); err != nil {
			t.Fatal(err)
		}
	}
	waitSessions(t, d.srv, 0)
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
	fake := cuda.NewFakeDriver()
	d := startDaemon(t, Config{OpenCUDA: func() (cuda.Driver, error) { return fake, nil }, AttachWithin: 200 * time.Millisecond})
	ctx := ctxT(t)
	go d.srv.Reap(ctx)
	cfg := d.config(t)
	gauge := func() float64 {
		var m dto.Metric
		if err := d.srv.metrics.devBytes.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetGauge().GetValue()
	}
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
	waitSessions(t, d.srv, 0) // the others never attached: reclaimed
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
	fake := cuda.NewFakeDriver()
	d := startDaemon(t, Config{OpenCUDA: func() (cuda.Driver, error) { return fake, nil }})
	ctx := ctxT(t)
	cfg := d.config(t)
	// read takes 6 batches of a new session; with control, the cuda ones
	// from the control block instead of messages.
	read := func(tr pb.Transport, job string, device uint32, control bool) ([][]byte, *pb.OpenSessionResponse) {
		o, err := d.client.OpenSession(ctx, &pb.OpenSessionRequest{Job: job, Config: cfg, DpRank: 0, DpSize: 1, Transport: tr, Device: device, Slots: 2})
		if err != nil {
			t.Fatal(err)
		}
		bs, err := d.client.Batches(ctx)
		if err != nil {
			t.Fatal(err)
		}
		bs.Send(&pb.BatchesRequest{Kind: &pb.BatchesRequest_Attach{Attach: &pb.Attach{SessionId: o.GetSessionId(), ShmControl: control}}})
		var mem []byte
		if tr == pb.Transport_TRANSPORT_CUDA {
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
			if _, err := d.client.CloseSession(ctx, &pb.CloseSessionRequest{SessionId: o.GetSessionId()}); err != nil {
				t.Fatal(err)
			}
			return out, o
		}
		for i := 0; i < 6; i++ {
			b, err := bs.Recv()
			if err != nil {
				t.Fatal(err)
			}
			n := int(b.GetLines()) * int(o.GetLineTokens()) * 4
			if tr == pb.Transport_TRANSPORT_CUDA {
				off := int(b.GetSlot()) * int(o.GetRing().GetSlotStride())
				if len(b.GetData()) != 0 {
					t.Fatal("cuda batch carried inline data")
				}
				out = append(out, append([]byte(nil), mem[off:off+n]...))
			} else {
				out = append(out, b.GetData())
			}
			bs.Send(&pb.BatchesRequest{Kind: &pb.BatchesRequest_Release{Release: &pb.Release{Slot: b.GetSlot(), Step: b.GetStep()}}})
		}
		if _, err := d.client.CloseSession(ctx, &pb.CloseSessionRequest{SessionId: o.GetSessionId()}); err != nil {
			t.Fatal(err)
		}
		return out, o
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
	waitSessions(t, d.srv, 0)
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
	waitSessions(t, d.srv, 0)
	// Every batch of the three cuda sessions went through a timed device copy.
	var copies dto.Metric
	if err := d.srv.metrics.devCopy.Write(&copies); err != nil {
		t.Fatal(err)
	}
	if n := copies.GetHistogram().GetSampleCount(); n < 3*6 {
		t.Fatalf("dataloaderd_device_copy_seconds counted %d copies, want at least the 18 batches read", n)
	}
	if c := fake.Counts(); c.DeviceAllocs+c.HostAllocs+c.Streams+c.Events+c.Contexts != 0 || c.PageableCopies != 0 {
		t.Fatalf("after close the fake driver holds %+v", c)
	}

	none := startDaemon(t, Config{OpenCUDA: func() (cuda.Driver, error) {
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

// TestShmControlOnOtherRings: attaching with shm_control to an inline session
// is refused with InvalidArgument, and the session goes on for a proper
// attach of the same consumer.
func TestShmControlOnOtherRings(t *testing.T) {
	d := startDaemon(t, Config{})
	ctx := ctxT(t)
	o, err := d.client.OpenSession(ctx, &pb.OpenSessionRequest{Job: "i", Config: d.config(t), DpSize: 1, Transport: pb.Transport_TRANSPORT_INLINE})
	if err != nil {
		t.Fatal(err)
	}
	bs, err := d.client.Batches(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bs.Send(&pb.BatchesRequest{Kind: &pb.BatchesRequest_Attach{Attach: &pb.Attach{SessionId: o.GetSessionId(), ShmControl: true}}})
	if _, err := bs.Recv(); code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "shm_control needs a ring with a control block") {
		t.Fatalf("shm_control on an inline session: %v", err)
	}
	bs, err = d.client.Batches(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bs.Send(&pb.BatchesRequest{Kind: &pb.BatchesRequest_Attach{Attach: &pb.Attach{SessionId: o.GetSessionId()}}})
	if b, err := bs.Recv(); err != nil || b.GetStep() != 1 || len(b.GetData()) == 0 {
		t.Fatalf("the session did not survive the refused attach: %v %v", b, err)
	}
}

// controlView is a client's mapping of a ring's control block, read and
// written by the offsets docs/design.md gives, not through cuda.Control.
type controlView struct {
	t   *testing.T
	mem []byte
}

func mapControl(t *testing.T, r *pb.Ring) *controlView {
	f, err := os.OpenFile(r.GetControlPath(), os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("control block: %v", err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, int(r.GetControlBytes()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	if string(m[:8]) != "DLDRING\x01" {
		t.Fatalf("control block starts %q", m[:8])
	}
	return &controlView{t: t, mem: m}
}

func (c *controlView) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&c.mem[off])) }
func (c *controlView) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&c.mem[off])) }

// next waits for step to be published and returns its slot and line count.
func (c *controlView) next(step uint64) (slot, lines int) {
	deadline := time.Now().Add(10 * time.Second)
	for atomic.LoadUint64(c.u64(32)) < step {
		if st := atomic.LoadUint32(c.u32(48)); st != 0 {
			c.t.Fatalf("control block state %d before step %d", st, step)
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("step %d not published in 10 s", step)
		}
		time.Sleep(50 * time.Microsecond)
	}
	slot = int((step - 1) % uint64(atomic.LoadUint32(c.u32(12))))
	rec := int(atomic.LoadUint32(c.u32(68))) + 16*slot
	if got := atomic.LoadUint64(c.u64(rec)); got != step {
		c.t.Fatalf("slot %d holds step %d, want %d", slot, got, step)
	}
	return slot, int(atomic.LoadUint32(c.u32(rec + 8)))
}

// release writes consumer's released step; the daemon's watcher sees it.
func (c *controlView) release(consumer uint32, step uint64) {
	atomic.StoreUint64(c.u64(int(atomic.LoadUint32(c.u32(72)))+128*int(consumer)), step)
}

// TestConcurrentOpenOfOneGroup: the processes of a tensor-parallel group
// start together and open their shared session at the same moment; each
// joins it (distinct consumer indexes), none is refused.
func TestConcurrentOpenOfOneGroup(t *testing.T) {
	d := startDaemon(t, Config{})
	ctx := ctxT(t)
	cfg := d.config(t)
	for round := range 5 {
		const n = 8
		job := fmt.Sprintf("tp%d", round)
		var wg sync.WaitGroup
		resps := make([]*pb.OpenSessionResponse, n)
		errs := make([]error, n)
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				resps[i], errs[i] = d.client.OpenSession(ctx, &pb.OpenSessionRequest{Job: job, Config: cfg, DpSize: 1, Consumers: n})
			})
		}
		close(start)
		wg.Wait()
		seen := map[uint32]bool{}
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("round %d: open %d of %d: %v", round, i, n, errs[i])
			}
			if resps[i].GetSessionId() != resps[0].GetSessionId() || seen[resps[i].GetConsumer()] {
				t.Fatalf("round %d: open %d: session %s consumer %d (first: %s)", round, i, resps[i].GetSessionId(), resps[i].GetConsumer(), resps[0].GetSessionId())
			}
			seen[resps[i].GetConsumer()] = true
		}
		for i := range n {
			if _, err := d.client.CloseSession(ctx, &pb.CloseSessionRequest{SessionId: resps[i].GetSessionId(), Consumer: resps[i].GetConsumer()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// One process opening a rank twice at once is still a duplicate: one of
	// the two is refused, and not with "opened concurrently".
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			_, errs[i] = d.client.OpenSession(ctx, &pb.OpenSessionRequest{Job: "dup", Config: cfg, DpSize: 1})
		})
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("two opens of a 1-consumer rank: %v, %v", errs[0], errs[1])
	}
	for _, err := range errs {
		if err != nil && (code(err) != codes.AlreadyExists || !strings.Contains(err.Error(), "duplicate session")) {
			t.Fatalf("the refused open: %v", err)
		}
	}
}
