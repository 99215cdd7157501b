package ring

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/dataloaderd/dataloaderd/internal/mapped"
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
	if err := CheckGeometry(slots, slotBytes); err != nil {
		return nil, err
	}
	if err := checkConsumers(consumers); err != nil {
		return nil, err
	}
	st := StrideFor(slotBytes)
	data := controlBytes(slots, consumers)
	path := filepath.Join(dir, name)
	mem, err := createShared(path, data+slots*st)
	if err != nil {
		return nil, err
	}
	r := &ShmRing{path: path, mem: mem, slots: slots, slotBytes: slotBytes, stride: st, data: data}
	r.ctl = initControl(mem[:data], slots, consumers, data, st)
	return r, nil
}

// Control implements Ring: the block at the start of the ring's file.
func (r *ShmRing) Control() *Control { return r.ctl }

// DataOffset is the file offset of slot 0 (the size of the control block).
func (r *ShmRing) DataOffset() int { return r.data }

// Layout implements Ring: clients map the file, the control block at its
// start and the slots from DataOffset.
func (r *ShmRing) Layout(int) Layout {
	return Layout{Path: r.path, DataOffset: r.data, Slots: r.slots, SlotBytes: r.slotBytes, Stride: r.stride,
		ControlPath: r.path, ControlBytes: r.data}
}

// AddReader implements Ring: every local process maps the same file.
func (r *ShmRing) AddReader(int) (bool, error) { return false, nil }

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

// Path is the ring's file.
func (r *ShmRing) Path() string { return r.path }

// Close unmaps the ring and removes its file; clients that still map it keep
// their mapping until they unmap.
func (r *ShmRing) Close() error {
	var first error
	if r.mem != nil {
		r.ctl.detach()
		mapped.Unregister(r.mem)
		first = unix.Munmap(r.mem)
		r.mem = nil
	}
	if err := os.Remove(r.path); err != nil && !os.IsNotExist(err) && first == nil {
		first = err
	}
	return first
}

// createShared creates path (which must not exist yet) with mode 0600, sizes
// it to size bytes and maps it shared for reading and writing. On error the
// file is gone.
func createShared(path string, size int) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, int64(size)); err != nil {
		if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.ENOSYS) {
			// ENOSPC above all: a sparse file would fault (SIGBUS) on first
			// touch instead, killing the daemon.
			os.Remove(path)
			return nil, fmt.Errorf("reserve %d bytes for %s: %w", size, path, err)
		}
		// A filesystem without fallocate: a sparse file it must be.
		if err := f.Truncate(int64(size)); err != nil {
			os.Remove(path)
			return nil, fmt.Errorf("size %s to %d bytes: %w", path, size, err)
		}
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("map %s (%d bytes): %w", path, size, err)
	}
	mapped.Register(mem, path)
	return mem, nil
}

// ControlFile is a control block alone in a file under /dev/shm, for a ring
// whose slots are not in shared host memory (a DeviceRing). Clients map it
// and use it as they use a ShmRing's: the daemon publishes which slot holds
// which step, and each consumer writes the last step it released. Its header
// says data offset 0 (no slot is in the file) and the device ring's stride.
type ControlFile struct {
	path string
	size int
	mem  []byte
	ctl  *Control
}

// NewControlFile creates dir/name holding the control block of a ring of
// slots slots (stride bytes apart) read by consumers consumers.
func NewControlFile(dir, name string, slots, consumers, stride int) (*ControlFile, error) {
	if slots < 2 || stride < 1 {
		return nil, fmt.Errorf("%w: control block for %d slots of stride %d", ErrGeometry, slots, stride)
	}
	if err := checkConsumers(consumers); err != nil {
		return nil, err
	}
	size := controlBytes(slots, consumers)
	path := filepath.Join(dir, name)
	mem, err := createShared(path, size)
	if err != nil {
		return nil, err
	}
	return &ControlFile{path: path, size: size, mem: mem, ctl: initControl(mem, slots, consumers, 0, stride)}, nil
}

// Control is the file's control block.
func (f *ControlFile) Control() *Control { return f.ctl }

// Path is the file clients map.
func (f *ControlFile) Path() string { return f.path }

// Size is the file's size: the bytes clients map. Safe to call after Close.
func (f *ControlFile) Size() int { return f.size }

// Close unmaps the block and removes the file; clients that still map it keep
// their mapping until they unmap. Closing twice is harmless.
func (f *ControlFile) Close() error {
	var first error
	if f.mem != nil {
		f.ctl.detach()
		mapped.Unregister(f.mem)
		first = unix.Munmap(f.mem)
		f.mem = nil
	}
	if err := os.Remove(f.path); err != nil && !os.IsNotExist(err) && first == nil {
		first = err
	}
	return first
}
