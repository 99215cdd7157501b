package session

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/dataloaderd/dataloaderd/internal/cuda"
	"github.com/dataloaderd/dataloaderd/internal/cuda/cudatest"
	"github.com/dataloaderd/dataloaderd/internal/ring"
	"github.com/dataloaderd/dataloaderd/internal/ring/ringtest"
)

// TestRingSuite runs the ring contract on the ring of every transport, as
// sessions make them: the device ring (on the fake driver, read by a
// consumer on GPU 1) with its control file included.
func TestRingSuite(t *testing.T) {
	fake := cudatest.NewDriver()
	m := newManager(t, Config{OpenCUDA: func() (cuda.Driver, error) { return fake, nil }})
	for _, tr := range []Transport{Shm, Inline, CUDA} {
		t.Run(tr.String(), func(t *testing.T) {
			n := 0
			ringtest.Run(t, ringtest.Impl{
				Make: func(t *testing.T, slots, slotBytes int) (ring.Ring, error) {
					n++
					g, err := newGeometry(slots, slotBytes)
					if err != nil {
						return nil, err
					}
					return m.newRing(ringSpec{id: fmt.Sprintf("suite-%d", n), transport: tr, device: 1,
						geometry: g, consumers: 1})
				},
				Device: 1,
				OpenIPC: func(t *testing.T, h []byte) []byte {
					mem, err := fake.OpenIPC(h)
					if err != nil {
						t.Fatal(err)
					}
					return mem
				},
				After: func(t *testing.T, r ring.Ring) {
					if r != nil {
						l := r.Layout(1)
						for _, p := range []string{l.Path, l.ControlPath} {
							if _, err := os.Stat(p); p != "" && !os.IsNotExist(err) {
								t.Errorf("%s left after Close: %v", p, err)
							}
						}
					}
					if c := fake.Counts(); c.DeviceAllocs+c.HostAllocs+c.Streams+c.Events+c.Contexts != 0 {
						t.Errorf("fake driver holds %+v after Close", c)
					}
				},
			})
		})
	}
}

// TestWatchAppliesControlReleases: a consumer of the control block reads
// each batch's announcement there and writes its releases there; Watch
// applies them (the producer of a 2-slot ring could not go on otherwise)
// and returns the last step once the bounded run ended.
func TestWatchAppliesControlReleases(t *testing.T) {
	m := newManager(t, Config{})
	o := mustOpen(t, m, Request{Job: "c", DPSize: 1, Slots: 2, Config: jobConfig(t, t.TempDir(), 1)})
	feed, err := m.Attach(0, o.ID, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	mem := mapShared(t, o.Ring.ControlPath, o.Ring.ControlBytes)
	u64 := func(off int) *uint64 { return (*uint64)(unsafe.Pointer(&mem[off])) }
	u32 := func(off int) *uint32 { return (*uint32)(unsafe.Pointer(&mem[off])) }
	released := u64(int(atomic.LoadUint32(u32(ring.HeaderConsumerRecords))) + ring.ConsumerRecordReleased)
	type result struct {
		last uint64
		err  error
	}
	done := make(chan result)
	go func() {
		last, err := feed.Watch(ctxT(t))
		done <- result{last, err}
	}()
	var step uint64
	deadline := time.Now().Add(10 * time.Second)
	for {
		for atomic.LoadUint64(u64(ring.HeaderPublished)) <= step && atomic.LoadUint32(u32(ring.HeaderState)) == ring.StateRunning {
			if time.Now().After(deadline) {
				t.Fatalf("step %d not published in 10 s", step+1)
			}
			time.Sleep(50 * time.Microsecond)
		}
		if atomic.LoadUint64(u64(ring.HeaderPublished)) <= step {
			break
		}
		step++
		atomic.StoreUint64(released, step)
	}
	r := <-done
	if r.err != nil || r.last != step || atomic.LoadUint32(u32(ring.HeaderState)) != ring.StateEnded || step < 3 {
		t.Fatalf("Watch returned %d, %v after %d steps were read; state %d", r.last, r.err, step, atomic.LoadUint32(u32(ring.HeaderState)))
	}
	if _, err := m.Attach(0, o.ID, 0, true); err == nil {
		t.Fatal("a second control attach of consumer 0 was accepted")
	}
	in := mustOpen(t, m, Request{Job: "i", DPSize: 1, Transport: Inline, Config: jobConfig(t, t.TempDir(), 0)})
	if _, err := m.Attach(0, in.ID, 0, true); err == nil {
		t.Fatal("a control attach of an inline session was accepted")
	}
}

// mapShared maps n bytes of a file read-write, as a client maps a control
// block.
func mapShared(t *testing.T, path string, n int) []byte {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	return mem
}
