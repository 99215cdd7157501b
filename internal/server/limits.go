package server

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/dataloaderd/dataloaderd/internal/session"
	"github.com/dataloaderd/dataloaderd/internal/state"
)

// Bounds of what the daemon reads from a client. The rule: whatever the
// daemon writes, it takes back. A session's state goes back in OpenSession
// (a DCP load sends resume_sharded; a client reopening its session after a
// daemon restart sends the state it kept), and a session's state is at most
// state.MaxBytes in either encoding (checked at open from the geometry), so
// an OpenSession request holds that beside its job config. gRPC's default
// of 4 MiB did not: a 90,000-point schedule, or a rank owning 2^20 shards,
// wrote states of 6 MB that no load could send back (issue 23). No other
// request carries a state, and each keeps gRPC's default.
//
// Bytes are not enough: a decoder allocates for each entry of a repeated or
// map field first, tens to hundreds of bytes for an entry of two on the
// wire, so the entries are counted before anything is decoded (wire.go).
// The counts below bound entries the daemon would refuse anyway, later:
// a session's mixture log keeps each schedule and each change of weights,
// a weight per dataset, MaxMixLog times and MaxQueued times over within
// state.MaxLogBytes (state.CheckLargest), which no config of more than
// about 870 datasets, 1,600 schedule points, or 5,000 weights (points
// times datasets) in its schedule passes, even at one shard a rank
// (TestWireBoundsPassNothingThatOpens). Other counts have their owners:
// resume_states at most stream.MaxLogicalShards states (no saved world had
// more ranks) and state.MaxBytes in all, resume_sharded at most
// state.MaxShardCursors shard cursors, config.metadata at most the fields
// there are (stream.MetadataFields).
const (
	// MaxConfigBytes bounds a job config (its wire size), as gRPC's own
	// limit did before.
	MaxConfigBytes = 4 << 20
	// MaxRequestBytes bounds an OpenSession request: a job config, the
	// largest state, and 1 MiB for the other fields (job name, paths).
	MaxRequestBytes = MaxConfigBytes + state.MaxBytes + 1<<20
	// MaxOtherRequestBytes bounds the request of every other method
	// (SetWeights, SaveState, GetState, CloseSession, StateTemplate, whose
	// job config wire.go bounds as OpenSession's, a batch stream's
	// messages, health checks): gRPC's default.
	MaxOtherRequestBytes = 4 << 20
	// MaxDatasets bounds the datasets of a job config, and the entries of
	// a weights map (a schedule point's, a SetWeights request's).
	MaxDatasets = 1024
	// MaxSchedulePoints bounds the points of a job config's schedule.
	MaxSchedulePoints = 2048
	// MaxScheduleWeights bounds the weights entries of all the points of a
	// schedule together (a valid schedule has one per point and dataset).
	MaxScheduleWeights = 8192
)

// serverOptions are the gRPC server's options: the peers' credentials, the
// limit on requests, the codec that bounds requests before they are
// decoded and sends inline batches from their slots, and the interceptors
// that refuse what the codec did not decode. gRPC's own limit is
// OpenSession's: the codec refuses any other request past
// MaxOtherRequestBytes unread. Replies are not bounded (gRPC's default): a
// GetState reply holds the state twice, in both encodings, and clients read
// any size (the Python client sets no limit either way).
func (s *Server) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.Creds(unixPeers{}),
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		grpc.ForceServerCodecV2(newBatchCodec()),
		grpc.ChainUnaryInterceptor(s.refuseUnary),
		grpc.ChainStreamInterceptor(refuseStream),
	}
}

// refusedField is the field number under which the codec leaves, as an
// unknown field of a request, why a part of it was not decoded (wire.go):
// the largest field number, which the API never uses.
const refusedField = protowire.MaxValidNumber

// refused is the reason the codec left in a request, or "".
func refused(req proto.Message) string {
	why := ""
	for r := (wireFields{req.ProtoReflect().GetUnknown()}); ; {
		num, typ, _, value, ok := r.next()
		if !ok {
			return why
		}
		if num == refusedField && typ == protowire.BytesType {
			why = string(value)
		}
	}
}

// checkRefused refuses a request the codec cut a part out of.
func checkRefused(req proto.Message) error {
	if why := refused(req); why != "" {
		return fmt.Errorf("%w: %s", session.ErrBadRequest, why)
	}
	return nil
}

// refuseUnary refuses, before its handler, a request the codec cut a part
// out of.
func (s *Server) refuseUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if m, ok := req.(proto.Message); ok {
		if err := checkRefused(m); err != nil {
			return nil, s.fail(err)
		}
	}
	return handler(ctx, req)
}

// refuseStream gives a stream's handler, as the error of its receive, a
// message the codec cut a part out of (the handler counts it).
func refuseStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, refusingStream{ss})
}

// refusingStream is a stream whose RecvMsg refuses a message the codec cut
// a part out of.
type refusingStream struct{ grpc.ServerStream }

// RecvMsg implements grpc.ServerStream.
func (r refusingStream) RecvMsg(m any) error {
	if err := r.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if pm, ok := m.(proto.Message); ok {
		if err := checkRefused(pm); err != nil {
			return toStatus(err)
		}
	}
	return nil
}
