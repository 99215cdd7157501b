package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/dataloaderd/dataloaderd/api/proto/dataloader/v1"
	"github.com/dataloaderd/dataloaderd/internal/session"
	"github.com/dataloaderd/dataloaderd/internal/state"
)

// takeInline opens an inline session, takes n batches, and returns their
// bytes and the session's state after the last one (both forms).
func takeInline(t *testing.T, ctx context.Context, d *daemon, req *pb.OpenSessionRequest, n int) ([]string, *pb.GetStateResponse) {
	t.Helper()
	req.Transport = pb.Transport_TRANSPORT_INLINE
	o, err := d.client.OpenSession(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	bs := d.attach(t, ctx, o, false)
	var got []string
	var last uint64
	for range n {
		b, err := bs.Recv()
		if err != nil {
			t.Fatal(err)
		}
		got, last = append(got, string(b.GetData())), b.GetStep()
		release(bs, b)
	}
	st, err := d.client.GetState(ctx, &pb.GetStateRequest{SessionId: o.GetSessionId(), Step: last})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.client.CloseSession(ctx, &pb.CloseSessionRequest{SessionId: o.GetSessionId()}); err != nil {
		t.Fatal(err)
	}
	return got, st
}

// TestResumeSharded: the shard cursors of every rank of a 2-rank world,
// pooled as torch.distributed.checkpoint pools them and handed to each rank
// of a 3-rank world for the shards it owns, resume each new rank exactly
// where the rank files of that world resume it. Shards of another rank are
// refused, naming one.
func TestResumeSharded(t *testing.T) {
	d := startDaemon(t, session.Config{})
	ctx := ctxT(t)
	cfg := d.config(t)
	var blobs [][]byte
	pool := map[state.ShardID]*pb.ShardState{}
	var run []byte
	for r := uint32(0); r < 2; r++ {
		_, st := takeInline(t, ctx, d, &pb.OpenSessionRequest{Job: fmt.Sprint("old", r), Config: cfg, DpRank: r, DpSize: 2}, 5+int(r))
		blobs = append(blobs, st.GetState())
		if len(st.GetSharded().GetShards()) != 4 || st.GetSharded().GetRun() == nil {
			t.Fatalf("rank %d of 2 over 8 shards gave %d shard cursors", r, len(st.GetSharded().GetShards()))
		}
		run = st.GetSharded().GetRun()
		for _, sh := range st.GetSharded().GetShards() {
			pool[state.ShardID{Dataset: int(sh.GetDataset()), Shard: sh.GetShard()}] = sh
		}
	}
	for r := uint32(0); r < 3; r++ {
		want, _ := takeInline(t, ctx, d, &pb.OpenSessionRequest{Job: fmt.Sprint("files", r), Config: cfg, DpRank: r, DpSize: 3, ResumeStates: blobs}, 4)
		lo, hi := state.Owned(r, 3, cfg.GetLogicalShards())
		mine := &pb.ShardedState{Run: run}
		for k := lo; k < hi; k++ {
			mine.Shards = append(mine.Shards, pool[state.ShardID{Dataset: 0, Shard: k}])
		}
		got, _ := takeInline(t, ctx, d, &pb.OpenSessionRequest{Job: fmt.Sprint("sharded", r), Config: cfg, DpRank: r, DpSize: 3, ResumeSharded: mine}, 4)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("rank %d of 3: batch %d from the pooled shard cursors differs from the rank files' resume", r, i+1)
			}
		}
	}
	wrong := &pb.ShardedState{Run: run, Shards: []*pb.ShardState{pool[state.ShardID{Dataset: 0, Shard: 0}]}}
	_, err := d.client.OpenSession(ctx, &pb.OpenSessionRequest{Job: "wrong", Config: cfg, DpRank: 2, DpSize: 3, ResumeSharded: wrong})
	if code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `dataset "web" shard 0, which dp_rank 2 of 3 does not own`) {
		t.Fatalf("another rank's shard: %v", err)
	}
	_, err = d.client.OpenSession(ctx, &pb.OpenSessionRequest{Job: "both", Config: cfg, DpSize: 1, ResumeSharded: wrong, ResumeStates: blobs})
	if code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "give one") {
		t.Fatalf("two ways to resume at once: %v", err)
	}
}
