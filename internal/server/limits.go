package server

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"

	pb "github.com/dataloaderd/dataloaderd/api/proto/dataloader/v1"
	"github.com/dataloaderd/dataloaderd/internal/session"
	"github.com/dataloaderd/dataloaderd/internal/state"
)

// Bounds of what the daemon reads from a client. The rule: whatever the
// daemon writes, it takes back. A session's state goes back in OpenSession
// (a DCP load sends resume_sharded; a client reopening its session after a
// daemon restart sends the state it kept), and a session's state is at most
// state.MaxBytes in either encoding (checked at open from the geometry), so
// a request holds that beside its job config. gRPC's default of 4 MiB did
// not: a 90,000-point schedule, or a rank owning 2^20 shards, wrote states
// of 6 MB that no load could send back (issue 23).
const (
	// MaxConfigBytes bounds a job config (its wire size), as gRPC's own
	// limit did before.
	MaxConfigBytes = 4 << 20
	// MaxRequestBytes bounds any request: a job config, the largest state,
	// and 1 MiB for the other fields (job name, paths).
	MaxRequestBytes = MaxConfigBytes + state.MaxBytes + 1<<20
)

// serverOptions are the gRPC server's options: the peers' credentials, the
// limit on requests, and the codec that sends inline batches from their
// slots. Replies are not bounded (gRPC's default): a GetState reply holds
// the state twice, in both encodings, and clients read any size (the
// Python client sets no limit either way).
func serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.Creds(unixPeers{}),
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		grpc.ForceServerCodecV2(newBatchCodec()),
	}
}

// refusedField is the field number under which openRequestWire leaves,
// as an unknown field of the request, why a part of it was not decoded:
// the largest field number, which the API never uses.
const refusedField = protowire.MaxValidNumber

// openRequestWire looks over an OpenSessionRequest's wire bytes before
// they are decoded, since decoding allocates for each entry of a repeated
// field first: a job config past MaxConfigBytes, or a resume_sharded with
// more shard cursors than any state a session may write has
// (state.MaxShardCursors), counting every occurrence of the field (a
// parser merges them), is cut out of a copy of b, and the reason put in
// its place, for requestFrom to refuse by name with the
// status of a bad request (an error here would reach the client as gRPC's
// INTERNAL). Bytes that do not parse are left to the decoder's error.
func openRequestWire(b []byte) []byte {
	fields := (&pb.OpenSessionRequest{}).ProtoReflect().Descriptor().Fields()
	configNum, shardedNum := fields.ByName("config").Number(), fields.ByName("resume_sharded").Number()
	var configBytes, cursors int
	eachField(b, func(num protowire.Number, typ protowire.Type, _, value []byte) {
		switch {
		case typ != protowire.BytesType:
		case num == configNum:
			configBytes += len(value)
		case num == shardedNum:
			cursors += shardCursors(value)
		}
	})
	var why string
	var cut protowire.Number
	switch {
	case configBytes > MaxConfigBytes:
		why = fmt.Sprintf("the job config is %.1f MiB, too large for the daemon: a job config must be under %d MiB; name a dataset's files by directory or glob rather than one by one",
			float64(configBytes)/(1<<20), MaxConfigBytes>>20)
		cut = configNum
	case cursors > state.MaxShardCursors:
		why = fmt.Sprintf("resume_sharded holds %d shard cursors, more than any state a session may write (%d, state.MaxShardCursors)",
			cursors, state.MaxShardCursors)
		cut = shardedNum
	default:
		return b
	}
	// A copy (b may be gRPC's own buffer), made only for a refusal.
	out := make([]byte, 0, len(b))
	eachField(b, func(num protowire.Number, _ protowire.Type, field, _ []byte) {
		if num != cut {
			out = append(out, field...)
		}
	})
	out = protowire.AppendTag(out, refusedField, protowire.BytesType)
	return protowire.AppendString(out, why)
}

// eachField calls f with each field of a message's wire bytes, in order:
// its number and type, the whole field (tag included), and for a
// length-delimited field its contents. It stops at bytes that do not parse.
func eachField(b []byte, f func(num protowire.Number, typ protowire.Type, field, value []byte)) {
	for off := 0; off < len(b); {
		num, typ, n := protowire.ConsumeTag(b[off:])
		if n < 0 {
			return
		}
		m := protowire.ConsumeFieldValue(num, typ, b[off+n:])
		if m < 0 {
			return
		}
		var value []byte
		if typ == protowire.BytesType {
			value, _ = protowire.ConsumeBytes(b[off+n:])
		}
		f(num, typ, b[off:off+n+m], value)
		off += n + m
	}
}

// shardCursors counts the shards entries of a ShardedState's wire bytes.
func shardCursors(b []byte) int {
	shardsNum := (&pb.ShardedState{}).ProtoReflect().Descriptor().Fields().ByName("shards").Number()
	k := 0
	eachField(b, func(num protowire.Number, _ protowire.Type, _, _ []byte) {
		if num == shardsNum {
			k++
		}
	})
	return k
}

// refused is the reason openRequestWire left in a request, or "".
func refused(req *pb.OpenSessionRequest) string {
	why := ""
	eachField(req.ProtoReflect().GetUnknown(), func(num protowire.Number, typ protowire.Type, _, value []byte) {
		if num == refusedField && typ == protowire.BytesType {
			why = string(value)
		}
	})
	return why
}

// checkRefused refuses a request openRequestWire cut a part out of.
func checkRefused(req *pb.OpenSessionRequest) error {
	if why := refused(req); why != "" {
		return fmt.Errorf("%w: %s", session.ErrBadRequest, why)
	}
	return nil
}
