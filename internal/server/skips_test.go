package server_test

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/dataloaderd/dataloaderd/api/proto/dataloader/v1"
	"github.com/dataloaderd/dataloaderd/internal/session"
	"github.com/dataloaderd/dataloaderd/internal/state"
)

// TestSkipStepsBoundedBeforeDecoding: a job config with more skip_steps
// ranges than a state keeps pending is refused by name before it is
// decoded (wire.go), in an OpenSession as in a StateTemplate request; a
// range whose first step is after its last is refused naming the field
// and the range.
func TestSkipStepsBoundedBeforeDecoding(t *testing.T) {
	d := startDaemon(t, session.Config{})
	cfg := d.config(t)
	for i := range state.MaxSkipsPending + 1 {
		cfg.SkipSteps = append(cfg.SkipSteps, &pb.StepRange{First: uint64(2*i + 1), Last: uint64(2*i + 1)})
	}
	want := fmt.Sprintf("config.skip_steps holds %d ranges, more than the %d", state.MaxSkipsPending+1, state.MaxSkipsPending)
	_, err := d.client.OpenSession(ctxT(t), &pb.OpenSessionRequest{Job: "many", Config: cfg, DpSize: 1})
	if code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), want) {
		t.Fatalf("open: want InvalidArgument %q, got %v", want, err)
	}
	_, err = d.client.StateTemplate(ctxT(t), &pb.StateTemplateRequest{Config: cfg, DpSize: 1})
	if code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), want) {
		t.Fatalf("template: want InvalidArgument %q, got %v", want, err)
	}
	bad := d.config(t)
	bad.SkipSteps = []*pb.StepRange{{First: 9, Last: 3}}
	_, err = d.client.OpenSession(ctxT(t), &pb.OpenSessionRequest{Job: "bad", Config: bad, DpSize: 1})
	if code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "skip_steps[0] [9, 3]: the first step is after the last") {
		t.Fatalf("a range backwards: %v", err)
	}
}
