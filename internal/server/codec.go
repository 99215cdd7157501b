package server

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/dataloaderd/dataloaderd/api/proto/dataloader/v1"
)

// batchCodec is the server's codec: gRPC's proto codec, except that the
// tokens of an inline batch go to the socket from the ring slot they lie
// in, not from a copy.
//
// The proto codec marshals each message into a buffer of its own: for an
// inline batch, a copy of the slot. gRPC holds that copy until the
// consumer's flow control lets the last byte out, marshals the next batch
// while it waits, and pools the buffers afterwards, so each inline stream
// held about three slots beside the ring's (issue 23: inline rings held
// 1.5x to 2.5x what the ring budget counted). Here a batch is its other
// fields, marshalled (a few bytes), then the data field's tag and length,
// then the slot's bytes themselves: the same wire bytes (a parser takes
// fields in any order), and nothing held but the ring.
//
// That is safe because a slot stays the consumer's until it releases it,
// and a consumer releases a batch after receiving it: the producer does not
// write into a slot gRPC is still sending from. A client that releases a
// batch it has not received tears only its own copy of it (the slot waits
// for every consumer's release). The one exception is SetWeights, which
// makes the batches after its step again, in their slots, even if a stream
// was handed them: those carry the old generation, and consumers drop them
// unread (stream.Pipeline.SetWeights).
type batchCodec struct {
	proto encoding.CodecV2
}

// newBatchCodec wraps gRPC's registered proto codec.
func newBatchCodec() batchCodec {
	return batchCodec{proto: encoding.GetCodecV2(protoenc.Name)}
}

// batchData is the field number of Batch.data.
var batchData = (&pb.Batch{}).ProtoReflect().Descriptor().Fields().ByName("data")

// Marshal implements encoding.CodecV2.
func (c batchCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.(*pb.Batch)
	if !ok || len(b.GetData()) == 0 {
		return c.proto.Marshal(v)
	}
	// Every field but data, by reflection, so that a field added to Batch
	// is sent without a change here.
	head := &pb.Batch{}
	dst := head.ProtoReflect()
	b.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, val protoreflect.Value) bool {
		if fd.Number() != batchData.Number() {
			dst.Set(fd, val)
		}
		return true
	})
	buf, err := proto.Marshal(head)
	if err != nil {
		return nil, err
	}
	buf = protowire.AppendTag(buf, batchData.Number(), protowire.BytesType)
	buf = protowire.AppendVarint(buf, uint64(len(b.Data)))
	return mem.BufferSlice{mem.SliceBuffer(buf), mem.SliceBuffer(b.Data)}, nil
}

// Unmarshal implements encoding.CodecV2. A request is bounded before it is
// decoded (requestWire, wire.go): gRPC's limit is OpenSession's
// (MaxRequestBytes), so any other request past MaxOtherRequestBytes is
// left unread, only the reason decoded, for the interceptors to refuse.
func (c batchCodec) Unmarshal(data mem.BufferSlice, v any) error {
	req, ok := v.(proto.Message)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	if _, open := req.(*pb.OpenSessionRequest); !open && data.Len() > MaxOtherRequestBytes {
		why := fmt.Sprintf("the %s is %.1f MiB, more than the %d MiB a request other than OpenSession may be (server.MaxOtherRequestBytes); it was not decoded",
			req.ProtoReflect().Descriptor().Name(), float64(data.Len())/(1<<20), MaxOtherRequestBytes>>20)
		return proto.Unmarshal(appendRefusal(nil, why), req)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return proto.Unmarshal(requestWire(buf.ReadOnlyData(), req), req)
}

// Name implements encoding.CodecV2: it is the proto codec, on the wire.
func (c batchCodec) Name() string { return c.proto.Name() }
