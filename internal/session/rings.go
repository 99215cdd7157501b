package session

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/dataloaderd/dataloaderd/internal/cuda"
	"github.com/dataloaderd/dataloaderd/internal/ring"
)

// geometry is a ring's slot count and slot size, checked (newGeometry):
// a ring is only made of one.
type geometry struct{ slots, slotBytes int }

// newGeometry checks a ring of slots of slotBytes (ring.CheckGeometry):
// every transport's ring is checked here, the device ring's too.
func newGeometry(slots, slotBytes int) (geometry, error) {
	if err := ring.CheckGeometry(slots, slotBytes); err != nil {
		return geometry{}, err
	}
	return geometry{slots: slots, slotBytes: slotBytes}, nil
}

// ringSpec is the ring a session asks for.
type ringSpec struct {
	id        string // names its files (newRing draws it)
	transport Transport
	device    int // the first consumer's GPU (cuda)
	geometry  geometry
	consumers int
}

// newRing makes the ring of a transport, as its entry in the transport
// table says. Its files are named by a token of their own, not by the
// session id: the shm directory is listable by anyone.
func (m *Manager) newRing(sp ringSpec) (ring.Ring, error) {
	sp.id = newSessionID()
	return sp.transport.of().newRing(m, sp)
}

// newShmRing makes a ring in a file of the shm directory.
func (m *Manager) newShmRing(sp ringSpec) (ring.Ring, error) {
	g := sp.geometry
	return ring.NewShmRing(m.cfg.ShmDir, ring.FileName(m.cfg.ShmInstance, sp.id), g.slots, g.slotBytes, sp.consumers)
}

// newDeviceRing makes a ring of device slots on the first consumer's GPU,
// opening the CUDA driver on first use, with a control block in a file of
// its own beside it. Without one (no writable shm directory), batches go by
// messages.
func (m *Manager) newDeviceRing(sp ringSpec) (ring.Ring, error) {
	devs, err := m.devices()
	if err != nil {
		return nil, fmt.Errorf("%w: cuda: %w; the shm and inline transports work without a GPU", ErrNoTransport, err)
	}
	g := sp.geometry
	r, err := devs.NewRing(sp.device, g.slots, g.slotBytes)
	if err != nil {
		return nil, fmt.Errorf("cuda ring on device %d (%d slots of %d bytes): %w", sp.device, g.slots, g.slotBytes, err)
	}
	r.OnCommit(func(took time.Duration) { m.metrics.devCopy.Observe(took.Seconds()) })
	// The ring counts its other GPUs and its freeing itself: a consumer may
	// join on another GPU until the moment the session closes.
	r.OnDeviceBytes(func(delta int) { m.metrics.devBytes.Add(float64(delta)) })
	m.metrics.devBytes.Add(float64(r.SlotsBytes()))
	d := &deviceRing{DeviceRing: r}
	d.ctl, err = ring.NewControlFile(m.cfg.ShmDir, ring.FileName(m.cfg.ShmInstance, sp.id)+".ctl", g.slots, sp.consumers, r.Stride())
	if err != nil {
		m.log.Warn("cuda session without a control block: batches go by messages", zap.String("session", sp.id), zap.Error(err))
		d.ctl = nil
	}
	return d, nil
}

// deviceRing is a cuda.DeviceRing as a ring.Ring: its slots on each
// consumer's GPU, and its control block in a file of its own (nil: batches
// go by messages).
type deviceRing struct {
	*cuda.DeviceRing
	ctl *ring.ControlFile
}

// Control implements ring.Ring.
func (d *deviceRing) Control() *ring.Control {
	if d.ctl == nil {
		return nil
	}
	return d.ctl.Control()
}

// Layout implements ring.Ring: the IPC handle of the slots on the
// consumer's GPU, and the control file.
func (d *deviceRing) Layout(device int) ring.Layout {
	l := ring.Layout{Slots: d.Slots(), SlotBytes: d.SlotBytes(), Stride: d.Stride(),
		IPCHandle: d.IPCHandle(device), Device: device}
	if d.ctl != nil {
		l.ControlPath, l.ControlBytes = d.ctl.Path(), d.ctl.Size()
	}
	return l
}

// AddReader implements ring.Ring: the ring gets slots on the consumer's GPU
// unless it has them there.
func (d *deviceRing) AddReader(device int) (bool, error) { return d.AddDevice(device) }

// Close implements ring.Ring: the device memory, then the control file.
func (d *deviceRing) Close() error {
	err := d.DeviceRing.Close()
	if d.ctl != nil {
		if cerr := d.ctl.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

var _ ring.Ring = (*deviceRing)(nil)
