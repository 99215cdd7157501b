package server_test

import (
	"context"
	"math/rand"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/dataloaderd/dataloaderd/api/proto/dataloader/v1"
	"github.com/dataloaderd/dataloaderd/internal/ring"
	"github.com/dataloaderd/dataloaderd/internal/server"
	"github.com/dataloaderd/dataloaderd/internal/session"
	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// daemon is the daemon's server and session manager on a unix socket in a
// temp dir, and a client of it: the tests of this package see it only as
// a client does, through the socket (and, as a local client does, through
// the rings and control blocks it maps), plus its session count and
// metrics.
type daemon struct {
	sessions *session.Manager
	reg      *prometheus.Registry
	client   pb.LoaderClient
	conn     *grpc.ClientConn
	shm      string
	data     string
	// stop stops the server and waits until it has (Serve returned, so
	// every handler has); later calls return at once.
	stop func() error
}

// startDaemon starts one; cfg's ShmDir and Registry are the test's own.
func startDaemon(t *testing.T, cfg session.Config) *daemon {
	t.Helper()
	dir := t.TempDir()
	cfg.ShmDir = filepath.Join(dir, "shm")
	os.Mkdir(cfg.ShmDir, 0o700)
	reg := prometheus.NewRegistry()
	cfg.Registry = reg
	sessions, err := session.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(server.Config{Sessions: sessions, StopTimeout: 5 * time.Second})
	lis, cleanup, err := server.Listen(filepath.Join(dir, "d.sock"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis) }()
	conn, err := grpc.NewClient("unix://"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	shutdown := sync.OnceValue(func() error {
		stop()
		return <-served
	})
	t.Cleanup(func() {
		conn.Close()
		if err := shutdown(); err != context.Canceled {
			t.Errorf("Serve returned %v, want context.Canceled", err)
		}
		cleanup()
		if left, _ := os.ReadDir(cfg.ShmDir); len(left) > 0 {
			t.Errorf("ring files left after shutdown: %v", left)
		}
	})
	data := filepath.Join(dir, "data")
	os.Mkdir(data, 0o755)
	return &daemon{sessions: sessions, reg: reg, client: pb.NewLoaderClient(conn), conn: conn, shm: cfg.ShmDir, data: data,
		stop: shutdown}
}

// config is a job of one small Megatron dataset in the daemon's data dir.
func (d *daemon) config(t *testing.T) *pb.JobConfig {
	docs, _ := testcorpus.UniqueDocs(rand.New(rand.NewSource(1)), 200, 50, 1)
	prefix := testcorpus.Megatron(t, d.data, "web", docs)
	return &pb.JobConfig{SeqLen: 15, BatchSize: 4, Seed: 9, LogicalShards: 8, EosId: 0, BosId: -1, PadId: 0,
		Datasets: []*pb.Dataset{{Name: "web", Path: prefix, Format: "megatron", Weight: 1}}}
}

// metric is the value of a gauge, or the sample count of a histogram, that
// the daemon exports under name (without labels); 0 when it has none.
func (d *daemon) metric(t *testing.T, name string) float64 {
	t.Helper()
	fams, err := d.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name || len(f.GetMetric()) == 0 {
			continue
		}
		m := f.GetMetric()[0]
		if h := m.GetHistogram(); h != nil {
			return float64(h.GetSampleCount())
		}
		return m.GetGauge().GetValue()
	}
	return 0
}

// attach opens o's batch stream, by messages or on the control block.
func (d *daemon) attach(t *testing.T, ctx context.Context, o *pb.OpenSessionResponse, control bool) grpc.BidiStreamingClient[pb.BatchesRequest, pb.Batch] {
	t.Helper()
	bs, err := d.client.Batches(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bs.Send(&pb.BatchesRequest{Kind: &pb.BatchesRequest_Attach{Attach: &pb.Attach{SessionId: o.GetSessionId(),
		Consumer: o.GetConsumer(), ShmControl: control}}})
	return bs
}

// release gives a batch's slot back on a message stream.
func release(bs grpc.BidiStreamingClient[pb.BatchesRequest, pb.Batch], b *pb.Batch) {
	bs.Send(&pb.BatchesRequest{Kind: &pb.BatchesRequest_Release{Release: &pb.Release{Slot: b.GetSlot(), Step: b.GetStep()}}})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func code(err error) codes.Code { return status.Code(err) }

// waitSessions polls until the daemon has n sessions.
func waitSessions(t *testing.T, d *daemon, n int) {
	t.Helper()
	for i := 0; i < 200 && d.sessions.Sessions() != n; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if got := d.sessions.Sessions(); got != n {
		t.Fatalf("%d sessions, want %d", got, n)
	}
}

// controlView is a client's mapping of a ring's control block, read and
// written by the layout's offsets (api/ring/v1/control_block.json), not
// through ring.Control.
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
	if string(m[:8]) != ring.Magic {
		t.Fatalf("control block starts %q", m[:8])
	}
	return &controlView{t: t, mem: m}
}

func (c *controlView) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&c.mem[off])) }
func (c *controlView) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&c.mem[off])) }

// next waits for step to be published and returns its slot and line count.
func (c *controlView) next(step uint64) (slot, lines int) {
	deadline := time.Now().Add(10 * time.Second)
	for atomic.LoadUint64(c.u64(ring.HeaderPublished)) < step {
		if st := atomic.LoadUint32(c.u32(ring.HeaderState)); st != ring.StateRunning {
			c.t.Fatalf("control block state %d before step %d", st, step)
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("step %d not published in 10 s", step)
		}
		time.Sleep(50 * time.Microsecond)
	}
	slot = int((step - 1) % uint64(atomic.LoadUint32(c.u32(ring.HeaderSlots))))
	rec := int(atomic.LoadUint32(c.u32(ring.HeaderSlotRecords))) + ring.SlotRecordBytes*slot
	if got := atomic.LoadUint64(c.u64(rec + ring.SlotRecordStep)); got != step {
		c.t.Fatalf("slot %d holds step %d, want %d", slot, got, step)
	}
	return slot, int(atomic.LoadUint32(c.u32(rec + ring.SlotRecordLines)))
}

// release writes consumer's released step; the daemon's watcher sees it.
func (c *controlView) release(consumer uint32, step uint64) {
	rec := int(atomic.LoadUint32(c.u32(ring.HeaderConsumerRecords))) + ring.ConsumerRecordBytes*int(consumer)
	atomic.StoreUint64(c.u64(rec+ring.ConsumerRecordReleased), step)
}
