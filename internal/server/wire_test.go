package server

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/dataloaderd/dataloaderd/api/proto/dataloader/v1"
	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// empties is n empty entries of field num: two bytes each on the wire.
func empties(num protowire.Number, n int) []byte {
	one := append(protowire.AppendTag(nil, num, protowire.BytesType), 0)
	return bytes.Repeat(one, n)
}

// weightEntries is n entries of the weights map field num, each with a
// key of its own (four letters) and no value: eight bytes each.
func weightEntries(num protowire.Number, n int) []byte {
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
	out := make([]byte, 0, 8*n)
	for i := 0; i < n; i++ {
		key := []byte{letters[i&63], letters[i>>6&63], letters[i>>12&63], letters[i>>18&63]}
		out = protowire.AppendTag(out, num, protowire.BytesType)
		out = protowire.AppendBytes(out, field(1, key))
	}
	return out
}

// field is one length-delimited field num holding inner.
func field(num protowire.Number, inner []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), inner)
}

// decodeAllocating decodes b into req through the server's codec, and
// returns the bytes allocated meanwhile (the tests here start no
// goroutine that allocates).
func decodeAllocating(t *testing.T, b []byte, req proto.Message) uint64 {
	t.Helper()
	c := newBatchCodec()
	var err error
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err = c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, req)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	return after.TotalAlloc - before.TotalAlloc
}

// TestAmplificationsRefusedBeforeDecoding: a request of small entries (two
// bytes each on the wire, eight for a weights entry with a key of its own)
// is refused before it is decoded, naming the field, its count and the
// bound, and decoding it allocates no more than a few KiB (16 MiB allowed).
// Before, every request but OpenSession took 37 MiB, and decoding these
// allocated (TotalAlloc): 36 MiB of empty resume_states 2,239 MiB (19
// million slices); 4 MiB of empty datasets 404 MiB, of empty schedule
// points 212 MiB, of empty metadata names 164 MiB; a schedule point of
// 4 MiB of weights 77 MiB; a SetWeights of 4 MiB of weights 77 MiB, of
// 36 MiB 642 MiB (issue 23).
func TestAmplificationsRefusedBeforeDecoding(t *testing.T) {
	const limit = 16 << 20
	job := field(fieldNumber(&pb.OpenSessionRequest{}, "job"), []byte("j"))
	config := func(inner []byte) []byte { return append(field(openConfig, inner), job...) }
	within := (MaxConfigBytes - 16) / 2 // empty entries of a config under MaxConfigBytes
	oneWeight := field(pointWeights, nil)
	wide := bytes.Repeat(field(configSchedule, bytes.Repeat(oneWeight, MaxDatasets)), MaxScheduleWeights/MaxDatasets+1)
	for _, c := range []struct {
		name string
		b    []byte
		req  func() proto.Message
		want string
	}{
		{"36 MiB of empty resume_states", append(empties(openStates, 36<<19), job...), func() proto.Message { return &pb.OpenSessionRequest{} },
			fmt.Sprintf("resume_states holds %d states, more than the ranks of any saved world this config resumes (%d", 36<<19, stream.MaxLogicalShards)},
		{"4 MiB of empty datasets", config(empties(configDatasets, within)), func() proto.Message { return &pb.OpenSessionRequest{} },
			fmt.Sprintf("config.datasets holds %d datasets, more than the %d", within, MaxDatasets)},
		{"4 MiB of empty schedule points", config(empties(configSchedule, within)), func() proto.Message { return &pb.OpenSessionRequest{} },
			fmt.Sprintf("config.schedule holds %d points, more than the %d", within, MaxSchedulePoints)},
		{"a schedule point of 4 MiB of weights", config(field(configSchedule, weightEntries(pointWeights, within/4-1))), func() proto.Message { return &pb.OpenSessionRequest{} },
			fmt.Sprintf("config.schedule[0].weights holds %d entries, more than the %d", within/4-1, MaxDatasets)},
		{"a schedule of too many weights in all", config(wide), func() proto.Message { return &pb.OpenSessionRequest{} },
			fmt.Sprintf("config.schedule holds %d weights in all, more than the %d", (MaxScheduleWeights/MaxDatasets+1)*MaxDatasets, MaxScheduleWeights)},
		{"4 MiB of empty metadata names", config(empties(configMetadata, within)), func() proto.Message { return &pb.OpenSessionRequest{} },
			fmt.Sprintf("config.metadata holds %d names, more than the %d", within, len(stream.MetadataFields))},
		{"a SetWeights of 4 MiB of weights", weightEntries(setWeightsWeights, MaxOtherRequestBytes/8), func() proto.Message { return &pb.SetWeightsRequest{} },
			fmt.Sprintf("weights holds %d entries, more than the %d datasets", MaxOtherRequestBytes/8, MaxDatasets)},
		{"a SetWeights of 36 MiB of weights", weightEntries(setWeightsWeights, 36<<17), func() proto.Message { return &pb.SetWeightsRequest{} },
			"the SetWeightsRequest is 36.0 MiB, more than the 4 MiB a request other than OpenSession may be"},
		{"a GetState of 5 MiB", field(fieldNumber(&pb.GetStateRequest{}, "session_id"), make([]byte, 5<<20)), func() proto.Message { return &pb.GetStateRequest{} },
			"the GetStateRequest is 5.0 MiB, more than the 4 MiB"},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := c.req()
			n := decodeAllocating(t, c.b, req)
			if n > limit {
				t.Errorf("decoding it allocated %d MiB", n>>20)
			}
			if why := refused(req); !strings.Contains(why, c.want) {
				t.Fatalf("refused %q, want %q", why, c.want)
			}
			// Nothing of the field past its bound was decoded.
			switch r := req.(type) {
			case *pb.OpenSessionRequest:
				if len(r.GetResumeStates()) != 0 || r.GetConfig() != nil || r.GetJob() != "j" {
					t.Fatalf("decoded %d states, config %v, job %q", len(r.GetResumeStates()), r.GetConfig() != nil, r.GetJob())
				}
			case *pb.SetWeightsRequest:
				if len(r.GetWeights()) != 0 {
					t.Fatalf("decoded %d weights", len(r.GetWeights()))
				}
			}
		})
	}
}

// TestRequestsWithinBoundsDecodeAsSent: requests at the bounds are decoded
// as sent, with no reason left in them: a config of MaxDatasets datasets,
// MaxSchedulePoints points, a point of MaxDatasets weights, every metadata
// field, and as many states as its logical_shards; a SetWeights of
// MaxDatasets weights; another request just under MaxOtherRequestBytes.
func TestRequestsWithinBoundsDecodeAsSent(t *testing.T) {
	cfg := &pb.JobConfig{LogicalShards: 2, Metadata: stream.MetadataFields}
	weights := map[string]float64{}
	for i := 0; i < MaxDatasets; i++ {
		name := fmt.Sprintf("d%d", i)
		cfg.Datasets = append(cfg.Datasets, &pb.Dataset{Name: name})
		weights[name] = 1
	}
	cfg.Schedule = append(cfg.Schedule, &pb.SchedulePoint{Weights: weights})
	for len(cfg.Schedule) < MaxSchedulePoints {
		cfg.Schedule = append(cfg.Schedule, &pb.SchedulePoint{Step: uint64(len(cfg.Schedule)), Weights: map[string]float64{"d0": 1}})
	}
	for _, req := range []proto.Message{
		&pb.OpenSessionRequest{Job: "j", Config: cfg, ResumeStates: [][]byte{[]byte("{}"), nil}},
		&pb.SetWeightsRequest{SessionId: "s", Weights: weights},
		&pb.GetStateRequest{SessionId: strings.Repeat("s", MaxOtherRequestBytes-8)},
	} {
		b, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		got := req.ProtoReflect().New().Interface()
		decodeAllocating(t, b, got)
		if why := refused(got); why != "" || !proto.Equal(got, req) {
			t.Fatalf("a %s within the bounds came back refused (%q) or changed", req.ProtoReflect().Descriptor().Name(), why)
		}
	}
}

// FuzzOpenRequestWire: whatever bytes come, a request the codec leaves
// unrefused holds no more entries than the bounds, and is what a plain
// decode of the bytes gives.
func FuzzOpenRequestWire(f *testing.F) {
	seed, _ := proto.Marshal(&pb.OpenSessionRequest{Job: "j", Config: &pb.JobConfig{Datasets: []*pb.Dataset{{Name: "a"}},
		Schedule: []*pb.SchedulePoint{{Weights: map[string]float64{"a": 1}}}}, ResumeStates: [][]byte{[]byte("{}")}})
	f.Add(seed)
	f.Add(append(empties(openStates, 3), field(openConfig, empties(configDatasets, 5))...))
	f.Fuzz(func(t *testing.T, b []byte) {
		var got pb.OpenSessionRequest
		if err := newBatchCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &got); err != nil || refused(&got) != "" {
			return
		}
		cfg := got.GetConfig()
		if len(cfg.GetDatasets()) > MaxDatasets || len(cfg.GetSchedule()) > MaxSchedulePoints || len(got.GetResumeStates()) > stream.MaxLogicalShards {
			t.Fatalf("an unrefused request past the bounds: %d datasets, %d points, %d states", len(cfg.GetDatasets()), len(cfg.GetSchedule()), len(got.GetResumeStates()))
		}
		var plain pb.OpenSessionRequest
		if err := proto.Unmarshal(b, &plain); err != nil || !proto.Equal(&plain, &got) {
			t.Fatalf("the codec decoded %v, a plain decode %v (%v)", &got, &plain, err)
		}
	})
}
