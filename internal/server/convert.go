package server

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/dataloaderd/dataloaderd/api/proto/dataloader/v1"
	"github.com/dataloaderd/dataloaderd/internal/session"
	"github.com/dataloaderd/dataloaderd/internal/state"
	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// wireTransports pairs each of the domain's transports (session's table)
// with the wire's: the one mapping, read both ways.
var wireTransports = map[session.Transport]pb.Transport{
	session.Shm:    pb.Transport_TRANSPORT_SHM,
	session.Inline: pb.Transport_TRANSPORT_INLINE,
	session.CUDA:   pb.Transport_TRANSPORT_CUDA,
}

// transportFrom maps the wire's transport to the domain's; unspecified is
// shm.
func transportFrom(w pb.Transport) (session.Transport, error) {
	if w == pb.Transport_TRANSPORT_UNSPECIFIED {
		return session.Shm, nil
	}
	for _, t := range session.Transports() {
		if wireTransports[t] == w {
			return t, nil
		}
	}
	return 0, fmt.Errorf("%w: transport %v is not supported (%s)", session.ErrBadRequest, w, session.TransportNames())
}

// requestFrom converts an OpenSession request into the domain's.
func requestFrom(req *pb.OpenSessionRequest) (session.Request, error) {
	if err := checkRefused(req); err != nil { // limits.go
		return session.Request{}, err
	}
	cfg, err := configFrom(req.GetConfig())
	if err != nil {
		return session.Request{}, err
	}
	t, err := transportFrom(req.GetTransport())
	if err != nil {
		return session.Request{}, err
	}
	r := session.Request{
		Job: req.GetJob(), DPRank: req.GetDpRank(), DPSize: req.GetDpSize(), Consumers: int(req.GetConsumers()),
		Transport: t, Slots: int(req.GetSlots()), Device: int(req.GetDevice()),
		ResumeFrom: req.GetResumeFrom(), ResumeStates: req.GetResumeStates(), Config: cfg,
		ReconnectedAfter: time.Duration(min(req.GetReconnectedAfterNs(), uint64(math.MaxInt64))),
		SkipToStep:       req.GetSkipToStep(),
		ReconnectStep:    req.GetReconnectStep(),
		Fresh:            req.GetFresh(),
	}
	if s := req.GetResumeSharded(); s != nil {
		sharded, err := shardedFrom(s)
		if err != nil {
			return session.Request{}, err
		}
		r.ResumeSharded = &sharded
	}
	return r, nil
}

// shardedFrom converts a sharded state from the wire; a shard given twice
// is refused.
func shardedFrom(s *pb.ShardedState) (state.Sharded, error) {
	out := state.Sharded{Run: s.GetRun(), Shards: make(map[state.ShardID]state.Shard, len(s.GetShards()))}
	for _, sh := range s.GetShards() {
		id := state.ShardID{Dataset: int(sh.GetDataset()), Shard: sh.GetShard()}
		if _, dup := out.Shards[id]; dup {
			return state.Sharded{}, fmt.Errorf("%w: resume_sharded holds %v twice", state.ErrMismatch, id)
		}
		out.Shards[id] = shardFrom(sh)
	}
	return out, nil
}

// shardFrom converts a shard's cursor from the wire.
func shardFrom(sh *pb.ShardState) state.Shard {
	return state.Shard{Lines: sh.GetLines(), Taken: sh.GetTaken(), Base: sh.GetBase(),
		Window: state.Cursor{Epoch: sh.GetEpoch(), Pos: sh.GetPos(), Offset: sh.GetOffset()}}
}

// CursorFields names the values of a shard's cursor as the client's state
// dict holds them (a tensor of as many ints, clients/python's _state.py):
// ShardState's fields after its (dataset, shard) key, in the message's
// order. dataloaderd inspect reads a DCP checkpoint's cursors by them.
func CursorFields() []string {
	var names []string
	for _, f := range cursorFields() {
		names = append(names, string(f.Name()))
	}
	return names
}

func cursorFields() []protoreflect.FieldDescriptor {
	fields := (&pb.ShardState{}).ProtoReflect().Descriptor().Fields()
	var out []protoreflect.FieldDescriptor
	for i := range fields.Len() {
		if f := fields.Get(i); f.Name() != "dataset" && f.Name() != "shard" {
			out = append(out, f)
		}
	}
	return out
}

// ShardFromCursor is the shard state a cursor's values give, in
// CursorFields' order; a cursor of another count, or a negative value, is
// refused.
func ShardFromCursor(values []int64) (state.Shard, error) {
	fields := cursorFields()
	if len(values) != len(fields) {
		return state.Shard{}, fmt.Errorf("%w: a shard cursor of %d values, want %d (%s)", state.ErrMismatch, len(values), len(fields), strings.Join(CursorFields(), ", "))
	}
	sh := &pb.ShardState{}
	m := sh.ProtoReflect()
	for i, f := range fields {
		if values[i] < 0 || f.Kind() != protoreflect.Uint64Kind {
			return state.Shard{}, fmt.Errorf("%w: a shard cursor's %s is %d, want a count >= 0", state.ErrMismatch, f.Name(), values[i])
		}
		m.Set(f, protoreflect.ValueOfUint64(uint64(values[i])))
	}
	return shardFrom(sh), nil
}

// shardedTo converts a sharded state to the wire, shards in (dataset, shard)
// order.
func shardedTo(s state.Sharded) *pb.ShardedState {
	out := &pb.ShardedState{Run: s.Run}
	for id, sh := range s.Shards {
		out.Shards = append(out.Shards, &pb.ShardState{Dataset: uint32(id.Dataset), Shard: id.Shard, Lines: sh.Lines,
			Epoch: sh.Window.Epoch, Pos: sh.Window.Pos, Offset: sh.Window.Offset, Taken: sh.Taken, Base: sh.Base})
	}
	slices.SortFunc(out.Shards, func(a, b *pb.ShardState) int {
		return cmp.Or(cmp.Compare(a.GetDataset(), b.GetDataset()), cmp.Compare(a.GetShard(), b.GetShard()))
	})
	return out
}

// configFrom converts the wire config into the stream package's.
func configFrom(c *pb.JobConfig) (stream.Config, error) {
	if c == nil {
		return stream.Config{}, fmt.Errorf("%w: config is missing", stream.ErrInvalidConfig)
	}
	out := stream.Config{
		SeqLen: c.GetSeqLen(), BatchSize: c.GetBatchSize(), Seed: c.GetSeed(), LogicalShards: c.GetLogicalShards(),
		EOS: c.GetEosId(), BOS: c.GetBosId(), Pad: c.GetPadId(), Epochs: c.GetEpochs(), ShuffleWindow: c.GetShuffleWindow(), RunTokens: c.GetRunTokens(),
		Metadata: c.GetMetadata(), Positions: c.GetPositions(), MaskDocumentBoundaries: c.GetMaskDocumentBoundaries(),
	}
	for _, d := range c.GetDatasets() {
		out.Datasets = append(out.Datasets, stream.Dataset{
			Name: d.GetName(), Path: d.GetPath(), Format: d.GetFormat(), Weight: d.GetWeight(), Dtype: d.GetDtype(),
			Field: d.GetField(), Tokenizer: d.GetTokenizer(), OnBadRecord: d.GetOnBadRecord(),
		})
	}
	for i, p := range c.GetSchedule() {
		pt, err := schedulePointFrom(i, p, out.Datasets)
		if err != nil {
			return stream.Config{}, err
		}
		out.Schedule = append(out.Schedule, pt)
	}
	for _, r := range c.GetSkipSteps() {
		out.SkipSteps = append(out.SkipSteps, state.SkipRange{First: r.GetFirst(), Last: r.GetLast()})
	}
	if b := c.GetBlocklist(); b != nil {
		out.Blocklist.Files = b.GetFiles()
		for _, d := range b.GetDocuments() {
			out.Blocklist.Documents = append(out.Blocklist.Documents, stream.BlockedDocument{
				Dataset: d.GetDataset(), File: d.GetFile(), Document: d.Document, SHA256: d.GetSha256(), Line: d.Line, Row: d.Row})
		}
	}
	return out, nil
}

// rangesTo converts skip ranges to the wire's.
func rangesTo(rs []state.SkipRange) []*pb.StepRange {
	out := make([]*pb.StepRange, len(rs))
	for i, r := range rs {
		out[i] = &pb.StepRange{First: r.First, Last: r.Last}
	}
	return out
}

// schedulePointFrom converts schedule point i, whose weights name the
// datasets, into weights in dataset order (stream.WeightsByName).
func schedulePointFrom(i int, p *pb.SchedulePoint, ds []stream.Dataset) (state.SchedulePoint, error) {
	ws, err := stream.WeightsByName(fmt.Sprintf("schedule[%d] (step %d)", i, p.GetStep()), "dataset", ds, p.GetWeights())
	return state.SchedulePoint{Step: p.GetStep(), Linear: p.GetLinear(), Weights: ws}, err
}

// openedTo converts an opened session into the OpenSession response.
func openedTo(o session.Opened) *pb.OpenSessionResponse {
	l := o.Ring
	return &pb.OpenSessionResponse{
		SessionId: o.ID, Consumer: uint32(o.Consumer), Transport: wireTransports[o.Transport],
		Ring: &pb.Ring{
			Path: l.Path, Slots: uint32(l.Slots), SlotBytes: uint64(l.SlotBytes), SlotStride: uint64(l.Stride),
			DataOffset: uint64(l.DataOffset), IpcHandle: l.IPCHandle, Device: uint32(l.Device),
			ControlPath: l.ControlPath, ControlBytes: uint64(l.ControlBytes),
		},
		LineTokens: uint32(o.LineTokens), BatchSize: o.BatchSize, StartStep: o.StartStep, MaxSkipSteps: o.MaxSkipSteps, Fields: fieldsTo(o.Fields),
		Continued: o.Continued, JobFingerprint: o.JobFingerprint, Skips: rangesTo(o.Skips),
	}
}

// fieldsTo converts a slot layout's fields to the wire's.
func fieldsTo(fs []stream.Field) []*pb.SlotField {
	out := make([]*pb.SlotField, 0, len(fs))
	for _, f := range fs {
		shape := make([]uint64, len(f.Shape))
		for i, n := range f.Shape {
			shape[i] = uint64(n)
		}
		out = append(out, &pb.SlotField{Name: f.Name, Offset: uint64(f.Offset), Dtype: f.Dtype, Shape: shape})
	}
	return out
}
