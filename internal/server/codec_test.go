package server

import (
	"strings"
	"testing"
	"unsafe"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/dataloaderd/dataloaderd/api/proto/dataloader/v1"
)

// TestBatchCodec: a batch the codec marshals parses back to the same
// message, every field of Batch set (a field added later included: they
// are set here by reflection), and its data is the slot itself, not a copy.
// Other messages are the proto codec's bytes.
func TestBatchCodec(t *testing.T) {
	c := newBatchCodec()
	slot := make([]byte, 1<<20)
	for i := range slot {
		slot[i] = byte(i * 7)
	}
	b := &pb.Batch{}
	fields := b.ProtoReflect().Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		var v protoreflect.Value
		switch fd.Kind() {
		case protoreflect.Uint64Kind:
			v = protoreflect.ValueOfUint64(1<<40 + uint64(i))
		case protoreflect.Uint32Kind:
			v = protoreflect.ValueOfUint32(1<<20 + uint32(i))
		case protoreflect.BoolKind:
			v = protoreflect.ValueOfBool(true)
		case protoreflect.BytesKind:
			v = protoreflect.ValueOfBytes(slot[:len(slot)-5])
		default:
			t.Fatalf("Batch.%s is a %v: give the test a value of that kind", fd.Name(), fd.Kind())
		}
		b.ProtoReflect().Set(fd, v)
	}
	out, err := c.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	var got pb.Batch
	if err := proto.Unmarshal(out.Materialize(), &got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&got, b) {
		t.Fatalf("the batch came back as %v", got.String()[:200])
	}
	last := out[len(out)-1].ReadOnlyData()
	if len(last) != len(b.Data) || unsafe.SliceData(last) != unsafe.SliceData(b.Data) {
		t.Fatal("the batch's data was copied: it must go out from its slot")
	}
	if n := out.Len() - len(b.Data); n > 64 {
		t.Fatalf("%d bytes beside the data", n)
	}

	other := &pb.OpenSessionRequest{Job: "j", DpSize: 3}
	mo, err := c.Marshal(other)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := proto.Marshal(other)
	if string(mo.Materialize()) != string(want) {
		t.Fatal("another message is not the proto codec's bytes")
	}
	var back pb.OpenSessionRequest
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(want)}, &back); err != nil || !proto.Equal(&back, other) {
		t.Fatalf("unmarshal: %v %v", err, &back)
	}
	if c.Name() != "proto" {
		t.Fatalf("codec name %q", c.Name())
	}
}

// TestOpenRequestWire: a request within the bounds is decoded as sent; a
// job config past MaxConfigBytes, even split into occurrences of its field
// that a parser would merge, is cut out unread, and the reason kept.
func TestOpenRequestWire(t *testing.T) {
	c := newBatchCodec()
	req := &pb.OpenSessionRequest{Job: "j", DpSize: 2, Config: &pb.JobConfig{SeqLen: 7, Datasets: []*pb.Dataset{{Name: "a"}}}}
	b, _ := proto.Marshal(req)
	var got pb.OpenSessionRequest
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &got); err != nil || !proto.Equal(&got, req) || refused(&got) != "" {
		t.Fatalf("a small request came back as %v (%v, %q)", &got, err, refused(&got))
	}
	// Three configs of 1.5 MiB each: a parser merges them into 4.5 MiB.
	part := &pb.JobConfig{Datasets: []*pb.Dataset{{Name: string(make([]byte, 3<<19))}}}
	pb1, _ := proto.Marshal(part)
	var big []byte
	for i := 0; i < 3; i++ {
		big = protowire.AppendTag(big, 2, protowire.BytesType)
		big = protowire.AppendBytes(big, pb1)
	}
	big = append(big, b...)
	got = pb.OpenSessionRequest{}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(big)}, &got); err != nil {
		t.Fatal(err)
	}
	if got.GetJob() != "j" || len(got.GetConfig().GetDatasets()) != 0 || !strings.Contains(refused(&got), "the job config is 4.5 MiB") {
		t.Fatalf("a config of 4.5 MiB in three parts: job %q, %d datasets decoded, refused %q", got.GetJob(), len(got.GetConfig().GetDatasets()), refused(&got))
	}
}
