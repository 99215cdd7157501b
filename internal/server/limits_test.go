package server_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	pb "github.com/dataloaderd/dataloaderd/api/proto/dataloader/v1"
	"github.com/dataloaderd/dataloaderd/internal/server"
	"github.com/dataloaderd/dataloaderd/internal/session"
	"github.com/dataloaderd/dataloaderd/internal/state"
	dlstream "github.com/dataloaderd/dataloaderd/internal/stream"
)

// TestLargestStateGoesBack: whatever the daemon writes, it takes back. A
// state as large as a session of its config may come to write
// (state.Largest of the geometry: here 5.6 MB, the mixture log of a
// 1,000-point schedule at its fullest), in either form, opens a session
// through OpenSession: the DCP load (resume_sharded), the client's
// reopening of its session after a daemon restart (the state it kept) and
// a version 1 state dict (resume_states) of the largest state succeed.
// Before, gRPC's default 4 MiB limit refused them (issue 23: a 6 MB state
// the daemon had written could not be loaded). The states are real ones
// padded with spaces, which JSON allows, to the size the bound gives.
func TestLargestStateGoesBack(t *testing.T) {
	d := startDaemon(t, session.Config{})
	ctx := ctxT(t)
	cfg := d.config(t)
	const points = 1000
	for i := 0; i < points; i++ {
		cfg.Schedule = append(cfg.Schedule, &pb.SchedulePoint{Step: uint64(i) * 100, Weights: map[string]float64{"web": 1 + float64(i%7)}})
	}
	_, st := takeInline(t, ctx, d, &pb.OpenSessionRequest{Job: "src", Config: cfg, DpSize: 1}, 3)
	fp, _, err := state.Decode("state", st.GetState())
	if err != nil {
		t.Fatal(err)
	}
	largest, err := state.Largest(fp, cfg.GetLogicalShards(), points)
	if err != nil {
		t.Fatal(err)
	}
	if largest <= 4<<20 || largest > state.MaxBytes {
		t.Fatalf("the largest state of this config is %d bytes: the test wants one past gRPC's default 4 MiB, within state.MaxBytes", largest)
	}
	pad := func(b []byte, to int) []byte {
		return append(append([]byte(nil), b...), bytes.Repeat([]byte{' '}, to-len(b))...)
	}

	states := &pb.OpenSessionRequest{Job: "states", Config: cfg, DpSize: 1, ResumeStates: [][]byte{pad(st.GetState(), int(largest))}}
	sharded := proto.Clone(st.GetSharded()).(*pb.ShardedState)
	bound, _ := state.FileBound(fp, 1)
	sharded.Run = pad(sharded.Run, int(min(bound, largest)))
	shardedReq := &pb.OpenSessionRequest{Job: "sharded", Config: cfg, DpSize: 1, ResumeSharded: sharded}
	if proto.Size(sharded) <= 4<<20 {
		t.Fatalf("the sharded state is %d bytes", proto.Size(sharded))
	}
	for _, req := range []*pb.OpenSessionRequest{states, shardedReq} {
		o, err := d.client.OpenSession(ctx, req)
		if err != nil {
			t.Fatalf("%s: a state of the largest size its config gives (%d bytes): %v", req.GetJob(), largest, err)
		}
		if o.GetStartStep() != 3 {
			t.Fatalf("%s: resumed at step %d, want 3", req.GetJob(), o.GetStartStep())
		}
		if _, err := d.client.CloseSession(ctx, &pb.CloseSessionRequest{SessionId: o.GetSessionId()}); err != nil {
			t.Fatal(err)
		}
	}
	// One byte more than a rank owning every shard could write is no state
	// of this config.
	all, _ := state.FileBound(fp, cfg.GetLogicalShards())
	states.ResumeStates[0] = pad(st.GetState(), int(all)+1)
	states.Job = "over"
	if _, err := d.client.OpenSession(ctx, states); code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "it was not decoded") {
		t.Fatalf("a state past the bound: %v", err)
	}
	// Any state the bound lets a session write fits a request beside the
	// largest job config.
	if server.MaxRequestBytes < server.MaxConfigBytes+state.MaxBytes+1<<16 {
		t.Fatalf("MaxRequestBytes %d leaves no room for a config and a state", server.MaxRequestBytes)
	}
}

// TestShardCursorsBoundedBeforeDecoding: a resume_sharded with more shard
// cursors than any state a session may write is refused by name before
// they are decoded (each would be allocated first).
func TestShardCursorsBoundedBeforeDecoding(t *testing.T) {
	d := startDaemon(t, session.Config{})
	sharded := &pb.ShardedState{}
	for i := 0; i <= state.MaxShardCursors; i++ {
		sharded.Shards = append(sharded.Shards, &pb.ShardState{})
	}
	_, err := d.client.OpenSession(ctxT(t), &pb.OpenSessionRequest{Job: "many", Config: d.config(t), DpSize: 1, ResumeSharded: sharded})
	if code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), fmt.Sprintf("resume_sharded holds %d shard cursors", state.MaxShardCursors+1)) {
		t.Fatalf("%d shard cursors: %v", state.MaxShardCursors+1, err)
	}
}

// TestConfigTooLarge: a job config past MaxConfigBytes is refused by name,
// with how to shrink it, as gRPC's own limit refused it before the limit
// on requests was raised for states.
func TestConfigTooLarge(t *testing.T) {
	d := startDaemon(t, session.Config{})
	cfg := d.config(t)
	for i := 0; i < 5000; i++ {
		ds := proto.Clone(cfg.GetDatasets()[0]).(*pb.Dataset)
		ds.Name = strings.Repeat("x", 1000) + string(rune('a'+i%26))
		cfg.Datasets = append(cfg.Datasets, ds)
	}
	_, err := d.client.OpenSession(ctxT(t), &pb.OpenSessionRequest{Job: "huge", Config: cfg, DpSize: 1})
	if code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "too large for the daemon: a job config must be under 4 MiB") {
		t.Fatalf("a config of %d bytes: %v", proto.Size(cfg), err)
	}
}

// TestEntryCountsRefusedByName: a request with more entries than a bound
// allows is refused, InvalidArgument, naming the field, the count and the
// bound, and counted; a request of another method than OpenSession past
// MaxOtherRequestBytes likewise, a batch stream's message included (it
// ends the stream). Before, all went to the decoder, and the daemon took
// 37 MiB requests of every method (issue 23).
func TestEntryCountsRefusedByName(t *testing.T) {
	d := startDaemon(t, session.Config{})
	ctx := ctxT(t)
	cfg := d.config(t)
	open := func(f func(*pb.OpenSessionRequest)) error {
		req := &pb.OpenSessionRequest{Job: "j", Config: proto.Clone(cfg).(*pb.JobConfig), DpSize: 1}
		f(req)
		_, err := d.client.OpenSession(ctx, req)
		return err
	}
	many := func(n int) map[string]float64 {
		w := map[string]float64{}
		for i := 0; i < n; i++ {
			w[fmt.Sprintf("d%d", i)] = 1
		}
		return w
	}
	huge := strings.Repeat("s", server.MaxOtherRequestBytes)
	for want, err := range map[string]error{
		fmt.Sprintf("resume_states holds %d states, more than the ranks of any saved world this config resumes (%d", cfg.GetLogicalShards()+1, cfg.GetLogicalShards()): open(func(r *pb.OpenSessionRequest) {
			r.ResumeStates = make([][]byte, cfg.GetLogicalShards()+1)
		}),
		fmt.Sprintf("resume_states holds %d states, more than the ranks of any saved world this config resumes (%d", dlstream.MaxLogicalShards+1, dlstream.MaxLogicalShards): open(func(r *pb.OpenSessionRequest) {
			r.Config.LogicalShards = dlstream.MaxLogicalShards + 1 // refused, so not the bound
			r.ResumeStates = make([][]byte, dlstream.MaxLogicalShards+1)
		}),
		fmt.Sprintf("config.datasets holds %d datasets, more than the %d a job config may have", server.MaxDatasets+1, server.MaxDatasets): open(func(r *pb.OpenSessionRequest) {
			for len(r.Config.Datasets) <= server.MaxDatasets {
				r.Config.Datasets = append(r.Config.Datasets, &pb.Dataset{})
			}
		}),
		fmt.Sprintf("config.schedule holds %d points, more than the %d", server.MaxSchedulePoints+1, server.MaxSchedulePoints): open(func(r *pb.OpenSessionRequest) {
			for i := 0; i <= server.MaxSchedulePoints; i++ {
				r.Config.Schedule = append(r.Config.Schedule, &pb.SchedulePoint{Step: uint64(i), Weights: map[string]float64{"web": 1}})
			}
		}),
		fmt.Sprintf("config.schedule[1].weights holds %d entries, more than the %d", server.MaxDatasets+1, server.MaxDatasets): open(func(r *pb.OpenSessionRequest) {
			r.Config.Schedule = []*pb.SchedulePoint{{Weights: map[string]float64{"web": 1}}, {Step: 5, Weights: many(server.MaxDatasets + 1)}}
		}),
		fmt.Sprintf("weights holds %d entries, more than the %d datasets", server.MaxDatasets+1, server.MaxDatasets): func() error {
			_, err := d.client.SetWeights(ctx, &pb.SetWeightsRequest{SessionId: "s", Weights: many(server.MaxDatasets + 1)})
			return err
		}(),
		"the SetWeightsRequest is 4.0 MiB, more than the 4 MiB a request other than OpenSession may be": func() error {
			_, err := d.client.SetWeights(ctx, &pb.SetWeightsRequest{SessionId: huge})
			return err
		}(),
		"the GetStateRequest is 4.0 MiB": func() error {
			_, err := d.client.GetState(ctx, &pb.GetStateRequest{SessionId: huge})
			return err
		}(),
		"the SaveStateRequest is 4.0 MiB": func() error {
			_, err := d.client.SaveState(ctx, &pb.SaveStateRequest{Folder: huge})
			return err
		}(),
		"the CloseSessionRequest is 4.0 MiB": func() error {
			_, err := d.client.CloseSession(ctx, &pb.CloseSessionRequest{SessionId: huge})
			return err
		}(),
		"the BatchesRequest is 4.0 MiB": func() error {
			bs, err := d.client.Batches(ctx)
			if err != nil {
				return err
			}
			if err := bs.Send(&pb.BatchesRequest{Kind: &pb.BatchesRequest_Attach{Attach: &pb.Attach{SessionId: huge}}}); err != nil {
				return err
			}
			_, err = bs.Recv()
			return err
		}(),
	} {
		if code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), want) {
			t.Errorf("want InvalidArgument %q, got %v", want, err)
		}
	}
	if n := d.errorsByKind(t)[codes.InvalidArgument.String()]; n != 11 {
		t.Errorf("%v refusals counted, want 11", n)
	}
}

// TestWireBoundsPassNothingThatOpens: the counts bounded before decoding
// refuse no config that could open a session. Past each of them, a config
// is refused at open anyway (state.CheckLargest: its mixture log could
// outgrow state.MaxLogBytes), at one shard a rank, the geometry that
// leaves the log the most room.
func TestWireBoundsPassNothingThatOpens(t *testing.T) {
	fp := func(datasets int) state.Fingerprint {
		f := state.Fingerprint{SeqLen: 1, LogicalShards: 1}
		for i := 0; i < datasets; i++ {
			f.Datasets = append(f.Datasets, state.DatasetPrint{Name: fmt.Sprint(i), Format: "megatron"})
		}
		return f
	}
	refuses := func(datasets, points int) {
		t.Helper()
		if err := state.CheckLargest(fp(datasets), 0, 1, points); !errors.Is(err, state.ErrTooLarge) {
			t.Errorf("%d datasets, a schedule of %d points: %v; the bounds before decoding would refuse a config that opens", datasets, points, err)
		}
	}
	refuses(server.MaxDatasets+1, 1)
	refuses(1, server.MaxSchedulePoints+1)
	for _, datasets := range []int{1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987, server.MaxDatasets} {
		refuses(datasets, server.MaxScheduleWeights/datasets+1)
	}
}
