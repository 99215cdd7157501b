package server

import (
	"errors"
	"strings"
	"testing"

	pb "github.com/dataloaderd/dataloaderd/api/proto/dataloader/v1"
	"github.com/dataloaderd/dataloaderd/internal/session"
)

// TestTransportsBothWays: every transport of session's table has its own
// wire value, and the wire's value maps back to it; unspecified is shm,
// and a value the table lacks is refused naming the transports there are.
func TestTransportsBothWays(t *testing.T) {
	seen := map[pb.Transport]bool{}
	for _, tr := range session.Transports() {
		w, ok := wireTransports[tr]
		if !ok || w == pb.Transport_TRANSPORT_UNSPECIFIED || seen[w] {
			t.Fatalf("%v: wire %v (mapped %v, seen %v)", tr, w, ok, seen[w])
		}
		seen[w] = true
		if back, err := transportFrom(w); err != nil || back != tr {
			t.Fatalf("%v: wire %v maps back to %v, %v", tr, w, back, err)
		}
	}
	if tr, err := transportFrom(pb.Transport_TRANSPORT_UNSPECIFIED); err != nil || tr != session.Shm {
		t.Fatalf("unspecified: %v, %v", tr, err)
	}
	_, err := transportFrom(pb.Transport(99))
	if !errors.Is(err, session.ErrBadRequest) || !strings.HasSuffix(err.Error(), "transport 99 is not supported (shm, inline or cuda)") {
		t.Fatalf("unknown transport: %v", err)
	}
}
