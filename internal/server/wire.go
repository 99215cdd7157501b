package server

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/dataloaderd/dataloaderd/api/proto/dataloader/v1"
	"github.com/dataloaderd/dataloaderd/internal/state"
	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// A request's wire bytes are looked over before they are decoded, since a
// decoder allocates for each entry of a repeated or map field first: an
// entry of two bytes on the wire (its tag and a zero length) is a slice
// header, a message or a map entry of tens to hundreds of bytes decoded,
// so 36 MiB of empty resume_states came to 2.2 GiB allocated (issue 23).
// What is past a bound (limits.go) is cut out of a copy of the bytes, and
// the reason put in its place, for the interceptors (limits.go) to refuse
// by name with the status of a bad request before the handler runs (an
// error from the codec would reach the client as gRPC's INTERNAL). Occurrences of a field are counted together: a
// parser merges those of a message field and appends those of a repeated
// one. Bytes that do not parse are left to the decoder's error.

// The numbers of the fields counted, from the descriptors.
var (
	openConfig  = fieldNumber(&pb.OpenSessionRequest{}, "config")
	openStates  = fieldNumber(&pb.OpenSessionRequest{}, "resume_states")
	openSharded = fieldNumber(&pb.OpenSessionRequest{}, "resume_sharded")

	templateConfig = fieldNumber(&pb.StateTemplateRequest{}, "config")

	configShards   = fieldNumber(&pb.JobConfig{}, "logical_shards")
	configDatasets = fieldNumber(&pb.JobConfig{}, "datasets")
	configMetadata = fieldNumber(&pb.JobConfig{}, "metadata")
	configSchedule = fieldNumber(&pb.JobConfig{}, "schedule")
	configSkips    = fieldNumber(&pb.JobConfig{}, "skip_steps")
	pointWeights   = fieldNumber(&pb.SchedulePoint{}, "weights")
	shardedShards  = fieldNumber(&pb.ShardedState{}, "shards")

	setWeightsWeights = fieldNumber(&pb.SetWeightsRequest{}, "weights")
)

// fieldNumber is the number of m's field name.
func fieldNumber(m proto.Message, name protoreflect.Name) protowire.Number {
	return m.ProtoReflect().Descriptor().Fields().ByName(name).Number()
}

// requestWire is the bytes to decode into req: b, or where a part of it
// is past a bound, a copy without that part and with the reason.
func requestWire(b []byte, req proto.Message) []byte {
	switch req.(type) {
	case *pb.OpenSessionRequest:
		return openRequestWire(b)
	case *pb.StateTemplateRequest:
		return templateRequestWire(b)
	case *pb.SetWeightsRequest:
		if n := countField(b, setWeightsWeights); n > MaxDatasets {
			return cutFields(b, []protowire.Number{setWeightsWeights},
				fmt.Sprintf("weights holds %d entries, more than the %d datasets a job config may have (server.MaxDatasets)", n, MaxDatasets))
		}
	}
	return b
}

// openCounts are what decoding an OpenSessionRequest would allocate one by
// one, counted over every occurrence of each field.
type openCounts struct {
	configBytes, datasets, metadata int
	// logicalShards is the config's (its last occurrence's).
	logicalShards uint64
	// points are the schedule's points, weights their weights entries in
	// all, widest the index of the point with the most (widestWeights).
	points, weights, widest, widestWeights int
	// skips are the config's skip_steps ranges.
	skips              int
	states, stateBytes int
	cursors            int
}

// countOpen counts an OpenSessionRequest's wire bytes.
func countOpen(b []byte) openCounts {
	var c openCounts
	for r := (wireFields{b}); ; {
		num, typ, _, value, ok := r.next()
		switch {
		case !ok:
			return c
		case typ != protowire.BytesType:
			// Not the field's type: decoded as an unknown field.
		case num == openConfig:
			c.configBytes += len(value)
			c.countConfig(value)
		case num == openStates:
			c.states++
			c.stateBytes += len(value)
		case num == openSharded:
			c.cursors += countField(value, shardedShards)
		}
	}
}

// countConfig counts one occurrence of a JobConfig.
func (c *openCounts) countConfig(b []byte) {
	for r := (wireFields{b}); ; {
		num, typ, field, value, ok := r.next()
		switch {
		case !ok:
			return
		case num == configShards && typ == protowire.VarintType:
			_, _, n := protowire.ConsumeTag(field)
			c.logicalShards, _ = protowire.ConsumeVarint(field[n:])
		case typ != protowire.BytesType:
		case num == configDatasets:
			c.datasets++
		case num == configMetadata:
			c.metadata++
		case num == configSkips:
			c.skips++
		case num == configSchedule:
			n := countField(value, pointWeights)
			if n > c.widestWeights {
				c.widest, c.widestWeights = c.points, n
			}
			c.points++
			c.weights += n
		}
	}
}

// openRequestWire bounds an OpenSessionRequest: the job config's size and
// its datasets, metadata names, schedule points and weights entries; the
// resume_states' number (the ranks of a world saved under the config) and
// bytes; the shard cursors of resume_sharded
// (state.MaxShardCursors). Each field past a bound is cut.
func openRequestWire(b []byte) []byte {
	c := countOpen(b)
	var why []string
	var cut []protowire.Number
	add := func(field protowire.Number, format string, args ...any) {
		why = append(why, fmt.Sprintf(format, args...))
		if len(cut) == 0 || cut[len(cut)-1] != field {
			cut = append(cut, field)
		}
	}
	for _, w := range c.configRefusals() {
		add(openConfig, "%s", w)
	}
	// A world's dp_size is at most its logical_shards, which its states
	// share with the config that resumes them (a state of other
	// logical_shards is refused); the config's own is checked when it is.
	ranks := stream.MaxLogicalShards
	if c.logicalShards >= 1 && c.logicalShards < uint64(ranks) {
		ranks = int(c.logicalShards)
	}
	if c.states > ranks {
		add(openStates, "resume_states holds %d states, more than the ranks of any saved world this config resumes (%d: a world's dp_size is at most its logical_shards, the config's, and at most stream.MaxLogicalShards, %d)",
			c.states, ranks, stream.MaxLogicalShards)
	}
	if c.stateBytes > state.MaxBytes {
		add(openStates, "resume_states hold %d bytes in all, more than the %d (state.MaxBytes) a request may carry of states; resume a larger world with resume_from", c.stateBytes, state.MaxBytes)
	}
	if c.cursors > state.MaxShardCursors {
		add(openSharded, "resume_sharded holds %d shard cursors, more than any state a session may write (%d, state.MaxShardCursors)", c.cursors, state.MaxShardCursors)
	}
	if len(why) == 0 {
		return b
	}
	return cutFields(b, cut, strings.Join(why, "; "))
}

// configRefusals says what in the counted job config is past a bound: its
// size, its datasets, metadata names, schedule points and weights entries.
func (c openCounts) configRefusals() []string {
	var why []string
	add := func(format string, args ...any) { why = append(why, fmt.Sprintf(format, args...)) }
	if c.configBytes > MaxConfigBytes {
		add("the job config is %.1f MiB, too large for the daemon: a job config must be under %d MiB; name a dataset's files by directory or glob rather than one by one",
			float64(c.configBytes)/(1<<20), MaxConfigBytes>>20)
	}
	if c.datasets > MaxDatasets {
		add("config.datasets holds %d datasets, more than the %d a job config may have (server.MaxDatasets)", c.datasets, MaxDatasets)
	}
	if n := len(stream.MetadataFields); c.metadata > n {
		add("config.metadata holds %d names, more than the %d fields there are (%s)", c.metadata, n, strings.Join(stream.MetadataFields, ", "))
	}
	if c.skips > state.MaxSkipsPending {
		add("config.skip_steps holds %d ranges, more than the %d a state keeps pending (state.MaxSkipsPending)", c.skips, state.MaxSkipsPending)
	}
	if c.points > MaxSchedulePoints {
		add("config.schedule holds %d points, more than the %d a schedule may have (server.MaxSchedulePoints)", c.points, MaxSchedulePoints)
	}
	if c.widestWeights > MaxDatasets {
		add("config.schedule[%d].weights holds %d entries, more than the %d datasets a job config may have (server.MaxDatasets)", c.widest, c.widestWeights, MaxDatasets)
	}
	if c.weights > MaxScheduleWeights {
		add("config.schedule holds %d weights in all, more than the %d a schedule may have (server.MaxScheduleWeights: points times datasets)", c.weights, MaxScheduleWeights)
	}
	return why
}

// templateRequestWire bounds a StateTemplateRequest's job config as an
// OpenSessionRequest's is bounded.
func templateRequestWire(b []byte) []byte {
	var c openCounts
	for r := (wireFields{b}); ; {
		num, typ, _, value, ok := r.next()
		if !ok {
			break
		}
		if num == templateConfig && typ == protowire.BytesType {
			c.configBytes += len(value)
			c.countConfig(value)
		}
	}
	if why := c.configRefusals(); len(why) > 0 {
		return cutFields(b, []protowire.Number{templateConfig}, strings.Join(why, "; "))
	}
	return b
}

// cutFields is a copy of b (which may be gRPC's own buffer) without the
// fields numbered cut, and with why under refusedField. It is made only for
// a refusal, and grows with what is kept.
func cutFields(b []byte, cut []protowire.Number, why string) []byte {
	var out []byte
	for r := (wireFields{b}); ; {
		num, _, field, _, ok := r.next()
		if !ok {
			break
		}
		if !slices.Contains(cut, num) {
			out = append(out, field...)
		}
	}
	return appendRefusal(out, why)
}

// appendRefusal appends why to a message's wire bytes, under refusedField.
func appendRefusal(b []byte, why string) []byte {
	b = protowire.AppendTag(b, refusedField, protowire.BytesType)
	return protowire.AppendString(b, why)
}

// wireFields reads a message's wire bytes field by field.
type wireFields struct{ b []byte }

// next is the next field: its number and type, the whole field (tag
// included), and for a length-delimited field its contents; ok is false at
// the end, or at bytes that do not parse (left to the decoder's error).
func (r *wireFields) next() (num protowire.Number, typ protowire.Type, field, value []byte, ok bool) {
	num, typ, n := protowire.ConsumeTag(r.b)
	if n < 0 {
		return 0, 0, nil, nil, false
	}
	var m int
	if typ == protowire.BytesType {
		value, m = protowire.ConsumeBytes(r.b[n:])
	} else {
		m = protowire.ConsumeFieldValue(num, typ, r.b[n:])
	}
	if m < 0 {
		return 0, 0, nil, nil, false
	}
	field, r.b = r.b[:n+m], r.b[n+m:]
	return num, typ, field, value, true
}

// countField counts the length-delimited occurrences of field num in a
// message's wire bytes: the entries of a repeated message, bytes, string
// or map field.
func countField(b []byte, num protowire.Number) int {
	k := 0
	for r := (wireFields{b}); ; {
		n, typ, _, _, ok := r.next()
		if !ok {
			return k
		}
		if n == num && typ == protowire.BytesType {
			k++
		}
	}
}
