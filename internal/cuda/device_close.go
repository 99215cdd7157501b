package cuda

import "fmt"

// Close waits for copies in flight and frees everything the ring holds: its
// events, streams, pinned staging, device memory and its references to the
// GPUs' contexts. Closing twice is harmless. Clients that still have an IPC
// handle open should close it; the memory is theirs to unmap.
func (r *DeviceRing) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	if r.onBytes != nil {
		r.onBytes(-len(r.gpus) * r.slots * r.stride)
	}
	return r.free()
}

// free releases whatever of the ring was made and returns the first error.
// Staging is freed while the first GPU's context is still held.
func (r *DeviceRing) free() error {
	var errs []error
	for i := len(r.gpus) - 1; i > 0; i-- {
		errs = append(errs, r.freeGPU(r.gpus[i]))
	}
	if len(r.gpus) > 0 {
		g := r.gpus[0]
		errs = append(errs, r.drain(g))
		if r.staging != nil {
			errs = append(errs, r.devs.drv.HostFree(g.ctx, r.staging))
			r.staging = nil
		}
		errs = append(errs, r.freeGPU(g))
	}
	r.gpus = nil
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("close device ring: %w", err)
		}
	}
	return nil
}

// drain waits for g's stream: nothing is in flight after a successful
// Commit, but after a failed one a copy may still read staging.
func (r *DeviceRing) drain(g *gpuSlots) error {
	drv := r.devs.drv
	if g.stream == 0 || len(g.events) == 0 {
		return nil
	}
	if err := drv.EventRecord(g.ctx, g.events[0], g.stream); err != nil {
		return nil // nothing recorded: nothing to wait for that we could
	}
	return drv.EventSynchronize(g.ctx, g.events[0])
}

// freeGPU frees g's events, stream and memory and its context reference,
// after its stream drained; it returns the first error, naming the GPU.
func (r *DeviceRing) freeGPU(g *gpuSlots) error {
	drv := r.devs.drv
	errs := []error{r.drain(g)}
	for _, e := range g.events {
		errs = append(errs, drv.EventDestroy(g.ctx, e))
	}
	g.events = nil
	if g.stream != 0 {
		errs = append(errs, drv.StreamDestroy(g.ctx, g.stream))
		g.stream = 0
	}
	if g.mem != 0 {
		errs = append(errs, drv.MemFree(g.ctx, g.mem))
		g.mem = 0
	}
	if g.ctx != 0 {
		errs = append(errs, r.devs.release(g.dev))
		g.ctx = 0
	}
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("GPU %d: %w", g.dev, err)
		}
	}
	return nil
}
