package session

import (
	"errors"
	"strings"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/ring"
)

// TestPlanPerTransport: an open's plan takes its rules from the transport
// table: the host memory a ring takes (none for cuda, whose slots are on
// the GPU), the slot layout laid out once from the checked config, and
// the names an unknown transport is told of.
func TestPlanPerTransport(t *testing.T) {
	cfg := jobConfig(t, t.TempDir(), 1)
	for _, tr := range Transports() {
		p, err := newPlan(Request{Job: "p", DPSize: 1, Transport: tr, Slots: 4, Config: cfg}, DefaultSlots)
		if err != nil {
			t.Fatalf("%v: %v", tr, err)
		}
		slotBytes := cfg.Layout().Bytes
		want := int64(4 * ring.StrideFor(slotBytes))
		if tr == CUDA {
			want = 0
		}
		if p.ringBytes != want || p.geometry != (geometry{slots: 4, slotBytes: slotBytes}) || p.checked.Layout().Bytes != slotBytes {
			t.Errorf("%v: ring bytes %d, geometry %+v, layout %d bytes; want %d, 4 slots of %d", tr, p.ringBytes, p.geometry,
				p.checked.Layout().Bytes, want, slotBytes)
		}
	}
	_, err := newPlan(Request{Job: "p", DPSize: 1, Transport: CUDA + 1, Config: cfg}, DefaultSlots)
	if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "transport transport(4) is not supported (shm, inline or cuda)") {
		t.Fatalf("unknown transport: %v", err)
	}
	if got := Transports(); len(got) != 3 || got[0] != Shm || got[1] != Inline || got[2] != CUDA {
		t.Fatalf("transports %v", got)
	}
}
