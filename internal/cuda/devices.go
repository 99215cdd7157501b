package cuda

import (
	"fmt"
	"os"
	"sync"

	"github.com/dataloaderd/dataloaderd/internal/errkind"
)

// ErrGeometry marks a device ring that cannot be made with the sizes asked
// for.
var ErrGeometry = errkind.New(errkind.Invalid, "bad device ring geometry")

// maxRingBytes bounds one device ring.
const maxRingBytes = 16 << 30

// pageStride is slotBytes rounded up to the page size.
func pageStride(slotBytes int) int {
	page := os.Getpagesize()
	return (slotBytes + page - 1) / page * page
}

func checkGeometry(slots, slotBytes int) error {
	if slots < 2 || slotBytes < 1 || int64(slots)*int64(pageStride(slotBytes)) > maxRingBytes {
		return fmt.Errorf("%w: %d slots of %d bytes (want 2 or more slots of 1 byte or more, %d bytes at most)",
			ErrGeometry, slots, slotBytes, int64(maxRingBytes))
	}
	return nil
}

// Devices makes device rings on the GPUs of one driver. A CUDA context costs
// hundreds of MiB of GPU memory and a few hundred ms to create, so every ring
// on a GPU shares its primary context (the one PyTorch uses in the trainer
// processes too): it is retained for the first ring on the GPU and released
// when the last one closes. Make one Devices per process.
type Devices struct {
	drv Driver

	mu  sync.Mutex
	ctx map[int]*primary
}

type primary struct {
	ctx   Context
	rings int
}

// NewDevices returns a Devices over drv.
func NewDevices(drv Driver) *Devices {
	return &Devices{drv: drv, ctx: map[int]*primary{}}
}

// Driver is the driver the rings use.
func (d *Devices) Driver() Driver { return d.drv }

// Contexts is the number of GPUs whose primary context is retained.
func (d *Devices) Contexts() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.ctx)
}

func (d *Devices) acquire(dev int) (Context, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p := d.ctx[dev]; p != nil {
		p.rings++
		return p.ctx, nil
	}
	n, err := d.drv.DeviceCount()
	if err != nil {
		return 0, err
	}
	if dev < 0 || dev >= n {
		return 0, fmt.Errorf("%w: GPU %d asked for, the driver sees %d (CUDA_VISIBLE_DEVICES applies)", ErrNoSuchDevice, dev, n)
	}
	ctx, err := d.drv.RetainPrimaryContext(dev)
	if err != nil {
		return 0, err
	}
	d.ctx[dev] = &primary{ctx: ctx, rings: 1}
	return ctx, nil
}

func (d *Devices) release(dev int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.ctx[dev]
	if p == nil {
		return nil
	}
	if p.rings--; p.rings > 0 {
		return nil
	}
	delete(d.ctx, dev)
	return d.drv.ReleasePrimaryContext(dev)
}
