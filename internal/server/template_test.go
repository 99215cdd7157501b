package server_test

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/dataloaderd/dataloaderd/api/proto/dataloader/v1"
	"github.com/dataloaderd/dataloaderd/internal/server"
	"github.com/dataloaderd/dataloaderd/internal/session"
)

// shardKeys are a sharded state's (dataset, shard) keys, in its order.
func shardKeys(s *pb.ShardedState) [][2]uint32 {
	var out [][2]uint32
	for _, sh := range s.GetShards() {
		out = append(out, [2]uint32{sh.GetDataset(), sh.GetShard()})
	}
	return out
}

// TestStateTemplateOwnedShards: the template of rank r of w holds, in
// (dataset, shard) order, a zero cursor for each shard of the contiguous
// block [r*S/w, (r+1)*S/w) of every dataset (the README's rule, uneven
// splits included), no run part; the ranks of a world together hold every
// shard once; and a session opened for the rank owns the same shards.
func TestStateTemplateOwnedShards(t *testing.T) {
	d := startDaemon(t, session.Config{})
	base := d.config(t)
	second := proto.Clone(base.GetDatasets()[0]).(*pb.Dataset)
	second.Name = "code"
	base.Datasets = append(base.Datasets, second)
	for _, c := range []struct {
		rank, size, shards uint32
		lo, hi             uint32
	}{
		{0, 1, 8, 0, 8},
		{0, 3, 7, 0, 2},
		{1, 3, 7, 2, 4},
		{2, 3, 7, 4, 7},
		{3, 4, 10, 7, 10},
		{1, 4, 10, 2, 5},
		{4, 5, 5, 4, 5},
	} {
		t.Run(fmt.Sprintf("rank %d of %d over %d shards", c.rank, c.size, c.shards), func(t *testing.T) {
			cfg := proto.Clone(base).(*pb.JobConfig)
			cfg.LogicalShards = c.shards
			resp, err := d.client.StateTemplate(ctxT(t), &pb.StateTemplateRequest{Config: cfg, DpRank: c.rank, DpSize: c.size})
			if err != nil {
				t.Fatal(err)
			}
			var want [][2]uint32
			for ds := uint32(0); ds < 2; ds++ {
				for k := c.lo; k < c.hi; k++ {
					want = append(want, [2]uint32{ds, k})
				}
			}
			if got := shardKeys(resp.GetSharded()); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("owned shards %v, want %v", got, want)
			}
			if len(resp.GetSharded().GetRun()) != 0 {
				t.Fatalf("run part %q, want none", resp.GetSharded().GetRun())
			}
			for _, sh := range resp.GetSharded().GetShards() {
				if zero := (&pb.ShardState{Dataset: sh.GetDataset(), Shard: sh.GetShard()}); !proto.Equal(sh, zero) {
					t.Fatalf("cursor %v, want zero", sh)
				}
			}
		})
	}
	// Every shard once over the ranks of a world, and what a session owns.
	cfg := proto.Clone(base).(*pb.JobConfig)
	cfg.LogicalShards = 7
	seen := map[[2]uint32]int{}
	for r := uint32(0); r < 3; r++ {
		resp, err := d.client.StateTemplate(ctxT(t), &pb.StateTemplateRequest{Config: cfg, DpRank: r, DpSize: 3})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range shardKeys(resp.GetSharded()) {
			seen[k]++
		}
		o, err := d.client.OpenSession(ctxT(t), &pb.OpenSessionRequest{Job: "tpl", Config: cfg, DpRank: r, DpSize: 3})
		if err != nil {
			t.Fatal(err)
		}
		st, err := d.client.GetState(ctxT(t), &pb.GetStateRequest{SessionId: o.GetSessionId()})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := shardKeys(st.GetSharded()), shardKeys(resp.GetSharded()); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("rank %d of 3: the session owns %v, the template %v", r, got, want)
		}
		if _, err := d.client.CloseSession(ctxT(t), &pb.CloseSessionRequest{SessionId: o.GetSessionId()}); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != 14 {
		t.Fatalf("3 ranks' templates hold %d shards, want 14 (7 of each of 2 datasets)", len(seen))
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("shard %v is in %d ranks' templates", k, n)
		}
	}
	waitSessions(t, d, 0)
}

// TestStateTemplateRefusesAsOpen: a bad rank or config is refused with the
// code and the message OpenSession gives it (the same check), and opens
// nothing.
func TestStateTemplateRefusesAsOpen(t *testing.T) {
	d := startDaemon(t, session.Config{})
	good := d.config(t)
	with := func(f func(*pb.JobConfig)) *pb.JobConfig {
		c := proto.Clone(good).(*pb.JobConfig)
		f(c)
		return c
	}
	for _, c := range []struct {
		name       string
		cfg        *pb.JobConfig
		rank, size uint32
		want       string
	}{
		{"dp_rank out of range", good, 2, 2, "dp_rank 2 is out of range for dp_size 2"},
		{"dp_size 0", good, 0, 0, "dp_size must be at least 1"},
		{"more ranks than shards", good, 0, 9, "logical_shards (8) must be at least dp_size (9)"},
		{"no config", nil, 0, 1, "config is missing"},
		{"seq_len 0", with(func(c *pb.JobConfig) { c.SeqLen = 0 }), 0, 1, "seq_len must be at least 1"},
		{"no shards", with(func(c *pb.JobConfig) { c.LogicalShards = 0 }), 0, 1, "logical_shards must be at least 1"},
		{"unknown format", with(func(c *pb.JobConfig) { c.Datasets[0].Format = "csv" }), 0, 1, `unknown format "csv"`},
		{"a state larger than the daemon takes back", with(func(c *pb.JobConfig) { c.LogicalShards = 1 << 20 }), 0, 1,
			"owns 1048576 of logical_shards 1048576 in each of 1 datasets"},
		{"unknown schedule dataset", with(func(c *pb.JobConfig) {
			c.Schedule = []*pb.SchedulePoint{{Step: 0, Weights: map[string]float64{"nope": 1}}}
		}), 0, 1, `no dataset is named "nope"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := d.client.StateTemplate(ctxT(t), &pb.StateTemplateRequest{Config: c.cfg, DpRank: c.rank, DpSize: c.size})
			if code(err) != codes.InvalidArgument {
				t.Fatalf("StateTemplate: %v, want InvalidArgument", err)
			}
			if msg := status.Convert(err).Message(); !strings.Contains(msg, c.want) {
				t.Fatalf("StateTemplate: %q, want %q in it", msg, c.want)
			}
			_, openErr := d.client.OpenSession(ctxT(t), &pb.OpenSessionRequest{Job: "bad", Config: c.cfg, DpRank: c.rank, DpSize: c.size})
			if code(openErr) != code(err) || status.Convert(openErr).Message() != status.Convert(err).Message() {
				t.Fatalf("OpenSession refuses it with %v, StateTemplate with %v", openErr, err)
			}
		})
	}
	waitSessions(t, d, 0)
}

// TestStateTemplateBoundsItsConfig: a template's job config is bounded on
// the wire as an open's is, refused by name before it is decoded.
func TestStateTemplateBoundsItsConfig(t *testing.T) {
	d := startDaemon(t, session.Config{})
	cfg := d.config(t)
	for len(cfg.Datasets) <= server.MaxDatasets {
		cfg.Datasets = append(cfg.Datasets, &pb.Dataset{})
	}
	_, err := d.client.StateTemplate(ctxT(t), &pb.StateTemplateRequest{Config: cfg, DpRank: 0, DpSize: 1})
	want := fmt.Sprintf("config.datasets holds %d datasets, more than the %d", server.MaxDatasets+1, server.MaxDatasets)
	if code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), want) {
		t.Fatalf("StateTemplate: %v, want InvalidArgument naming %q", err, want)
	}
}
