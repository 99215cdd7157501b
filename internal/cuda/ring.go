// Package cuda holds the rings that batches are written into: host shared
// memory that every local process maps, plain process memory for the inline
// transport, and GPU memory exported over CUDA IPC (DeviceRing, through the
// CUDA driver loaded at run time). All are rings of equal, page-aligned
// slots behind one interface; a DeviceRing also needs Commit after a write.
package cuda

import (
	"errors"
	"fmt"
	"os"
)

// Ring is a ring of equal slots that the daemon writes batches into.
type Ring interface {
	// Slots is the number of slots.
	Slots() int
	// Slot returns slot i's memory, SlotBytes long.
	Slot(i int) []byte
	// SlotBytes is the size of a slot.
	SlotBytes() int
	// Stride is the distance between the starts of two slots (a multiple of
	// the page size), for clients that map the whole ring.
	Stride() int
	// Path is the file clients map; empty for rings only the daemon sees.
	Path() string
	// Close releases the memory and removes the file.
	Close() error
}

// ErrGeometry marks a ring that cannot be made with the sizes asked for.
var ErrGeometry = errors.New("bad ring geometry")

// MaxRingBytes bounds one ring, so that a config cannot exhaust memory.
const MaxRingBytes = 16 << 30

func stride(slotBytes int) int {
	page := os.Getpagesize()
	return (slotBytes + page - 1) / page * page
}

func checkGeometry(slots, slotBytes int) error {
	if slots < 2 || slotBytes < 1 {
		return fmt.Errorf("%w: %d slots of %d bytes (need at least 2 slots of at least 1 byte)", ErrGeometry, slots, slotBytes)
	}
	if total := int64(slots) * int64(stride(slotBytes)); total > MaxRingBytes {
		return fmt.Errorf("%w: %d slots of %d bytes is %d bytes, more than the %d-byte limit", ErrGeometry, slots, slotBytes, total, int64(MaxRingBytes))
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
	if err := checkGeometry(slots, slotBytes); err != nil {
		return nil, err
	}
	st := stride(slotBytes)
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

// Path implements Ring: a memory ring has no file.
func (m *MemRing) Path() string { return "" }

// Close implements Ring. The memory is left to the garbage collector: an
// inline stream may still be sending a slot it was handed when the session
// closes, and the slice it holds stays valid.
func (m *MemRing) Close() error { return nil }
