package cuda

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// DefaultShmDir is where shared-memory rings live.
const DefaultShmDir = "/dev/shm"

// ShmRing is a ring in a file under /dev/shm (mode 0600), mapped by the
// daemon for writing and by every local client for reading: each batch is
// written once and read in place. The file starts with a control block (see
// Control) and slot i lies at DataOffset() + i*Stride().
type ShmRing struct {
	path      string
	mem       []byte
	slots     int
	slotBytes int
	stride    int
	data      int
	ctl       *Control
}

// NewShmRing creates dir/name, sizes it for the control block of consumers
// and the slots, and maps it. The file must not exist yet.
func NewShmRing(dir, name string, slots, slotBytes, consumers int) (*ShmRing, error) {
	if err := checkGeometry(slots, slotBytes); err != nil {
		return nil, err
	}
	if err := checkConsumers(consumers); err != nil {
		return nil, err
	}
	st := stride(slotBytes)
	data := controlBytes(slots, consumers)
	size := data + slots*st
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create ring: %w", err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, int64(size)); err != nil {
		// tmpfs without fallocate: fall back to a sparse file; a full /dev/shm
		// then shows as SIGBUS on first touch, so say how much we needed.
		if err := f.Truncate(int64(size)); err != nil {
			os.Remove(path)
			return nil, fmt.Errorf("size ring %s to %d bytes: %w", path, size, err)
		}
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("map ring %s (%d bytes): %w", path, size, err)
	}
	r := &ShmRing{path: path, mem: mem, slots: slots, slotBytes: slotBytes, stride: st, data: data}
	r.ctl = initControl(mem[:data], slots, consumers, data, st)
	return r, nil
}

// Control is the ring's control block.
func (r *ShmRing) Control() *Control { return r.ctl }

// DataOffset is the file offset of slot 0 (the size of the control block).
func (r *ShmRing) DataOffset() int { return r.data }

// Slots implements Ring.
func (r *ShmRing) Slots() int { return r.slots }

// Slot implements Ring.
func (r *ShmRing) Slot(i int) []byte {
	off := r.data + i*r.stride
	return r.mem[off : off+r.slotBytes : off+r.slotBytes]
}

// SlotBytes implements Ring.
func (r *ShmRing) SlotBytes() int { return r.slotBytes }

// Stride implements Ring.
func (r *ShmRing) Stride() int { return r.stride }

// Path implements Ring.
func (r *ShmRing) Path() string { return r.path }

// Close unmaps the ring and removes its file; clients that still map it keep
// their mapping until they unmap.
func (r *ShmRing) Close() error {
	var first error
	if r.mem != nil {
		r.ctl.detach()
		first = unix.Munmap(r.mem)
		r.mem = nil
	}
	if err := os.Remove(r.path); err != nil && !os.IsNotExist(err) && first == nil {
		first = err
	}
	return first
}
