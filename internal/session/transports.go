package session

import (
	"fmt"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/ring"
)

// Transport is how a session's batches reach its consumers.
type Transport int

// Transports.
const (
	// Shm: a ring in a shared-memory file every local consumer maps.
	Shm Transport = iota + 1
	// Inline: batch bytes inside the stream's messages.
	Inline
	// CUDA: a ring of GPU slots shared over CUDA IPC.
	CUDA
)

// transport is what the daemon knows of one transport: the one table of
// them (as the client's DELIVERIES), read where a rule depends on which
// transport a session has, so that none asks for a transport by name.
type transport struct {
	name string
	// hostSlots: the ring's slots take host memory, counted in the ring
	// budget (a cuda ring's slots are on the GPU).
	hostSlots bool
	// inHeap: the ring's slots are in the Go heap, not in the shm
	// directory's pages (HostRingsOutsideHeap).
	inHeap bool
	// inMessages: a batch's bytes travel in the stream's messages.
	inMessages bool
	// newRing makes the transport's ring (rings.go).
	newRing func(m *Manager, sp ringSpec) (ring.Ring, error)
}

// transports is the table, by Transport, in the order messages list them.
var transports = [...]transport{
	Shm: {name: "shm", hostSlots: true, newRing: (*Manager).newShmRing},
	Inline: {name: "inline", hostSlots: true, inHeap: true, inMessages: true,
		newRing: func(_ *Manager, sp ringSpec) (ring.Ring, error) {
			return ring.NewMemRing(sp.geometry.slots, sp.geometry.slotBytes)
		}},
	CUDA: {name: "cuda", newRing: (*Manager).newDeviceRing},
}

// Transports lists the transports, in the table's order.
func Transports() []Transport {
	out := make([]Transport, 0, len(transports))
	for t := range transports {
		if t > 0 {
			out = append(out, Transport(t))
		}
	}
	return out
}

// spec returns the transport's entry in the table, and whether it has one.
func (t Transport) spec() (*transport, bool) {
	if t < Shm || int(t) >= len(transports) {
		return nil, false
	}
	return &transports[t], true
}

// of returns the entry of a transport the request was resolved with (a
// session's always has one).
func (t Transport) of() *transport {
	s, ok := t.spec()
	if !ok {
		panic(fmt.Sprintf("session: %v has no entry in the transport table", t))
	}
	return s
}

func (t Transport) String() string {
	if s, ok := t.spec(); ok {
		return s.name
	}
	return fmt.Sprintf("transport(%d)", int(t))
}

// TransportNames lists the transports for messages: "shm, inline or cuda".
func TransportNames() string {
	var names []string
	for _, t := range Transports() {
		names = append(names, t.String())
	}
	return files.List(names, "or")
}
