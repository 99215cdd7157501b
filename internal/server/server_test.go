package server_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/dataloaderd/dataloaderd/api/proto/dataloader/v1"
	"github.com/dataloaderd/dataloaderd/internal/server"
	"github.com/dataloaderd/dataloaderd/internal/session"
	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
	"math/rand"
)

func TestHealth(t *testing.T) {
	d := startDaemon(t, session.Config{})
	resp, err := healthpb.NewHealthClient(d.conn).Check(ctxT(t), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", resp, err)
	}
}

func TestShmSessionSaveAndReclaim(t *testing.T) {
	d := startDaemon(t, session.Config{})
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
	waitSessions(t, d, 0)
	if _, err := os.Stat(open.GetRing().GetPath()); !os.IsNotExist(err) {
		t.Fatalf("ring file still there: %v", err)
	}
}

func TestInlineAndConsumers(t *testing.T) {
	d := startDaemon(t, session.Config{})
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
	waitSessions(t, d, 0)
}

func TestOpenErrors(t *testing.T) {
	root := t.TempDir()
	d := startDaemon(t, session.Config{AllowRoots: []string{root}})
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
	if d.sessions.Sessions() != 0 {
		t.Fatalf("%d sessions after refused opens", d.sessions.Sessions())
	}
}

func TestSocketPath(t *testing.T) {
	long := "/tmp/" + strings.Repeat("x", 120) + ".sock"
	if _, _, err := server.Listen(long); err == nil || !strings.Contains(err.Error(), "longer than the 107") {
		t.Fatalf("long socket path: %v", err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "s.sock")
	l, cleanup, err := server.Listen("unix://" + p)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode %v", fi.Mode().Perm())
	}
	// A live socket is not replaced.
	if _, _, err := server.Listen(p); err == nil || !strings.Contains(err.Error(), "another daemon") {
		t.Fatalf("listen on a live socket: %v", err)
	}
	l.Close()
	// A stale one (nothing answers) is.
	l2, cleanup2, err := server.Listen(p)
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

// TestShmControlOnOtherRings: attaching with shm_control to an inline session
// is refused with InvalidArgument, and the session goes on for a proper
// attach of the same consumer.
func TestShmControlOnOtherRings(t *testing.T) {
	d := startDaemon(t, session.Config{})
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

// TestConcurrentOpenOfOneGroup: the processes of a tensor-parallel group
// start together and open their shared session at the same moment; each
// joins it (distinct consumer indexes), none is refused.
func TestConcurrentOpenOfOneGroup(t *testing.T) {
	d := startDaemon(t, session.Config{})
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
