// Package ring holds the rings that batches are written into: host shared
// memory that every local process maps (ShmRing), plain process memory for
// the inline transport (MemRing), and the control block through which the
// daemon announces batches and clients release them (Control). The ring of
// GPU slots lives in package cuda; package session adapts it to Ring.
//
// Every ring is a ring of equal, page-aligned slots behind one interface,
// and describes to its consumers what to map (Layout): the transport never
// asks which kind of ring it holds.
package ring

import (
	"fmt"
	"os"

	"github.com/dataloaderd/dataloaderd/internal/errkind"
)

// Ring is a ring of equal slots that the daemon writes batches into.
type Ring interface {
	// Slots is the number of slots.
	Slots() int
	// Slot returns slot i's memory, SlotBytes long, for the producer to write.
	Slot(i int) []byte
	// SlotBytes is the size of a slot.
	SlotBytes() int
	// Stride is the distance between the starts of two slots (a multiple of
	// the page size), for clients that map the whole ring.
	Stride() int
	// Control is the ring's control block; nil when it has none, and then
	// batches are announced by messages.
	Control() *Control
	// Layout is what a consumer on GPU device maps to read the ring.
	Layout(device int) Layout
	// AddReader prepares the ring for a consumer on GPU device and reports
	// whether that took new memory (a device ring then holds its slots on
	// that GPU too); host rings need nothing.
	AddReader(device int) (bool, error)
	// Close releases the memory and removes the ring's files.
	Close() error
}

// Layout describes a ring to a consumer: where its slots and its control
// block are and how they are laid out.
type Layout struct {
	// Path is the file holding the slots; empty when they are in no file
	// (inline: only the daemon sees them; a device ring: IPCHandle).
	Path string
	// DataOffset is the file offset of slot 0 in Path.
	DataOffset int
	// Slots, SlotBytes and Stride are the ring's geometry.
	Slots, SlotBytes, Stride int
	// ControlPath is the file holding the control block, ControlBytes how
	// much of it to map; empty and 0 when the ring has none.
	ControlPath  string
	ControlBytes int
	// IPCHandle is the CUDA IPC handle of device slots; nil for host rings.
	IPCHandle []byte
	// Device is the GPU whose slots the consumer reads; 0 for host rings.
	Device int
}

// ErrGeometry marks a ring that cannot be made with the sizes asked for.
var ErrGeometry = errkind.New(errkind.Invalid, "bad ring geometry")

// MaxRingBytes bounds one ring, so that a config cannot exhaust memory.
const MaxRingBytes = 16 << 30

// MaxConsumers bounds the consumers of one ring (one tensor/pipeline
// parallel group).
const MaxConsumers = 256

// StrideFor is the slot stride of slots of slotBytes: slotBytes rounded up
// to the page size.
func StrideFor(slotBytes int) int {
	page := os.Getpagesize()
	return (slotBytes + page - 1) / page * page
}

// CheckGeometry refuses a ring of fewer than 2 slots, of empty slots, or of
// more than MaxRingBytes.
func CheckGeometry(slots, slotBytes int) error {
	if slots < 2 || slotBytes < 1 {
		return fmt.Errorf("%w: %d slots of %d bytes (need at least 2 slots of at least 1 byte)", ErrGeometry, slots, slotBytes)
	}
	if total := int64(slots) * int64(StrideFor(slotBytes)); total > MaxRingBytes {
		return fmt.Errorf("%w: %d slots of %d bytes is %d bytes, more than the %d-byte limit", ErrGeometry, slots, slotBytes, total, int64(MaxRingBytes))
	}
	return nil
}

// checkConsumers validates a consumer count for a control block.
func checkConsumers(n int) error {
	if n < 1 || n > MaxConsumers {
		return fmt.Errorf("%w: %d consumers (want 1 to %d)", ErrGeometry, n, MaxConsumers)
	}
	return nil
}

// MemRing is a ring in the daemon's own memory, for the inline transport.
type MemRing struct {
	buf       []byte
	slots     int
	slotBytes int
	stride    int
}

// NewMemRing allocates a ring of slots in process memory.
func NewMemRing(slots, slotBytes int) (*MemRing, error) {
	if err := CheckGeometry(slots, slotBytes); err != nil {
		return nil, err
	}
	st := StrideFor(slotBytes)
	return &MemRing{buf: make([]byte, slots*st), slots: slots, slotBytes: slotBytes, stride: st}, nil
}

// Slots implements Ring.
func (m *MemRing) Slots() int { return m.slots }

// Slot implements Ring.
func (m *MemRing) Slot(i int) []byte {
	return m.buf[i*m.stride : i*m.stride+m.slotBytes : i*m.stride+m.slotBytes]
}

// SlotBytes implements Ring.
func (m *MemRing) SlotBytes() int { return m.slotBytes }

// Stride implements Ring.
func (m *MemRing) Stride() int { return m.stride }

// Control implements Ring: a memory ring's batches go by messages.
func (m *MemRing) Control() *Control { return nil }

// Layout implements Ring: a memory ring has no file; its batches travel in
// the messages.
func (m *MemRing) Layout(int) Layout {
	return Layout{Slots: m.slots, SlotBytes: m.slotBytes, Stride: m.stride}
}

// AddReader implements Ring: every consumer reads the messages.
func (m *MemRing) AddReader(int) (bool, error) { return false, nil }

// Close implements Ring. The memory is left to the garbage collector: an
// inline stream may still be sending a slot it was handed when the session
// closes, and the slice it holds stays valid.
func (m *MemRing) Close() error { return nil }

var (
	_ Ring = (*MemRing)(nil)
	_ Ring = (*ShmRing)(nil)
)
