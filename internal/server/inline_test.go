package server_test

import (
	"context"
	"math"
	"math/rand"
	"net"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/dataloaderd/dataloaderd/api/proto/dataloader/v1"
	"github.com/dataloaderd/dataloaderd/internal/session"
	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
)

// countingConn counts the bytes a client reads from its socket.
type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

// heapAfterGC is the live heap once the garbage and gRPC's pooled buffers
// (sync.Pools empty over two collections) are gone.
func heapAfterGC() int64 {
	var ms runtime.MemStats
	for i := 0; i < 3; i++ {
		runtime.GC()
	}
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestInlineHoldsWhatIsCounted: an inline session holds its ring and no
// more, however slowly its consumer reads; what the ring budget counts is
// what the daemon holds. Before, gRPC's proto codec marshalled each batch
// into a copy of its slot, and held that copy until the consumer's flow
// control let it out (and the next one while it waited): inline rings held
// 1.5x to 2.5x what the budget counted (issue 23), so a budget that fits
// the memory limit did not hold.
//
// The consumer takes batch 1 and stops reading; the test waits until bytes
// of batch 2 reached its socket (so the server is sending it, as far as
// flow control lets it), then weighs the daemon's heap.
func TestInlineHoldsWhatIsCounted(t *testing.T) {
	d := startDaemon(t, session.Config{})
	docs, _ := testcorpus.UniqueDocs(rand.New(rand.NewSource(3)), 4000, 600, 1)
	cfg := &pb.JobConfig{SeqLen: 32767, BatchSize: 32, Seed: 1, LogicalShards: 2, BosId: -1, // 4 MiB a batch
		Datasets: []*pb.Dataset{{Name: "web", Path: testcorpus.Megatron(t, d.data, "web", docs), Format: "megatron", Weight: 1}}}
	const batchBytes = 32 * 32768 * 4

	// A client whose windows stay at 64 KiB (no BDP growth), so a batch it
	// does not read stays in the server.
	var read atomic.Int64
	sock := filepath.Join(filepath.Dir(d.shm), "d.sock")
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(1<<16), grpc.WithInitialConnWindowSize(1<<16),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32)),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "unix", sock)
			return countingConn{Conn: c, read: &read}, err
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewLoaderClient(conn)
	ctx := ctxT(t)

	before := heapAfterGC()
	o, err := client.OpenSession(ctx, &pb.OpenSessionRequest{Job: "mem", Config: cfg, DpSize: 1, Slots: 2,
		Transport: pb.Transport_TRANSPORT_INLINE})
	if err != nil {
		t.Fatal(err)
	}
	bs, err := client.Batches(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bs.Send(&pb.BatchesRequest{Kind: &pb.BatchesRequest_Attach{Attach: &pb.Attach{SessionId: o.GetSessionId()}}})
	b, err := bs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if b.GetStep() != 1 || len(b.GetData()) != batchBytes {
		t.Fatalf("batch %d of %d bytes, want 1 of %d", b.GetStep(), len(b.GetData()), batchBytes)
	}
	b = nil
	// Batch 2 is on its way once the socket gave more than batch 1 and
	// its frames' headers (9 bytes a 16 KiB frame).
	for read.Load() < batchBytes+32<<10 {
		if ctx.Err() != nil {
			t.Fatalf("batch 2 never came: %d bytes read", read.Load())
		}
		time.Sleep(time.Millisecond)
	}
	held := heapAfterGC() - before
	counted := int64(d.metric(t, "dataloaderd_ring_bytes"))
	if counted != 2*batchBytes {
		t.Fatalf("ring bytes %d, want 2 slots of %d", counted, batchBytes)
	}
	// The session's other memory (its rank, the corpus index) is well
	// under 1 MiB; a copy of a batch is 4.
	if held > counted+1<<20 {
		t.Fatalf("an inline session whose consumer reads slowly holds %.1f MiB, its ring %.1f MiB: batches are held beside their slots",
			float64(held)/(1<<20), float64(counted)/(1<<20))
	}
	t.Logf("held %.1f MiB, ring %.1f MiB", float64(held)/(1<<20), float64(counted)/(1<<20))
}
