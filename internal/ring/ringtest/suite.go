// Package ringtest is the contract every ring.Ring keeps, as one suite of
// tests that each kind of ring runs (shm and memory rings in package ring,
// the device ring in package session): the geometry asked for, disjoint
// slots, what a consumer sees through the ring's Layout after a write (and a
// commit, for rings that need one), bad geometry refused, Close twice.
package ringtest

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dataloaderd/dataloaderd/internal/ring"
)

// Impl is one kind of ring under test.
type Impl struct {
	Name string
	// Make makes a ring of slots of slotBytes.
	Make func(t *testing.T, slots, slotBytes int) (ring.Ring, error)
	// Device is the GPU the suite's consumer says it is on.
	Device int
	// OpenIPC maps the device memory an IPC handle names, as a consumer
	// does; needed only by rings whose Layout gives one.
	OpenIPC func(t *testing.T, handle []byte) []byte
	// After checks, once the ring is closed (r is nil after a refused
	// Make), that it left nothing behind; may be nil.
	After func(t *testing.T, r ring.Ring)
}

// committer is a ring whose slots reach their readers only when committed.
type committer interface{ Commit(i int) error }

// Run runs the suite on impl.
func Run(t *testing.T, impl Impl) {
	t.Run("Geometry", func(t *testing.T) { testGeometry(t, impl) })
	t.Run("SlotsAreDisjoint", func(t *testing.T) { testDisjoint(t, impl) })
	t.Run("ConsumerSeesCommittedSlot", func(t *testing.T) { testConsumerSees(t, impl) })
	t.Run("BadGeometry", func(t *testing.T) { testBadGeometry(t, impl) })
	t.Run("CloseTwice", func(t *testing.T) { testCloseTwice(t, impl) })
}

func (impl Impl) after(t *testing.T, r ring.Ring) {
	if impl.After != nil {
		impl.After(t, r)
	}
}

func mustRing(t *testing.T, impl Impl, slots, slotBytes int) ring.Ring {
	t.Helper()
	r, err := impl.Make(t, slots, slotBytes)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// consumerView is what a consumer on impl.Device reads of slot i, found
// from the ring's Layout alone: the mapped file, the device memory of the
// IPC handle, or (a ring in no file and on no GPU: inline) the bytes the
// daemon would send.
func consumerView(t *testing.T, impl Impl, r ring.Ring, i int) []byte {
	t.Helper()
	l := r.Layout(impl.Device)
	if l.Slots != r.Slots() || l.SlotBytes != r.SlotBytes() || l.Stride != r.Stride() {
		t.Fatalf("layout %+v does not give the ring's geometry (%d slots of %d, stride %d)", l, r.Slots(), r.SlotBytes(), r.Stride())
	}
	switch {
	case l.Path != "":
		f, err := os.Open(l.Path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		m, err := unix.Mmap(int(f.Fd()), int64(l.DataOffset+i*l.Stride), l.SlotBytes, unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Munmap(m) })
		return m
	case l.IPCHandle != nil:
		if l.Device != impl.Device {
			t.Fatalf("a consumer on GPU %d is given slots on GPU %d", impl.Device, l.Device)
		}
		mem := impl.OpenIPC(t, l.IPCHandle)
		return mem[i*l.Stride : i*l.Stride+l.SlotBytes]
	default:
		return r.Slot(i)
	}
}

func testGeometry(t *testing.T, impl Impl) {
	for _, g := range [][2]int{{2, 1}, {3, 5000}, {4, 4096}, {5, 4097}} {
		r := mustRing(t, impl, g[0], g[1])
		if r.Slots() != g[0] || r.SlotBytes() != g[1] {
			t.Errorf("asked for %d slots of %d bytes, got %d of %d", g[0], g[1], r.Slots(), r.SlotBytes())
		}
		if r.Stride()%os.Getpagesize() != 0 || r.Stride() < r.SlotBytes() || r.Stride()-r.SlotBytes() >= os.Getpagesize() {
			t.Errorf("%d-byte slots: stride %d is not the next page multiple", g[1], r.Stride())
		}
		for i := range r.Slots() {
			if s := r.Slot(i); len(s) != g[1] || cap(s) != g[1] {
				t.Errorf("slot %d: len %d cap %d, want %d", i, len(s), cap(s), g[1])
			}
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		impl.after(t, r)
	}
}

func testDisjoint(t *testing.T, impl Impl) {
	r := mustRing(t, impl, 3, 5000)
	defer r.Close()
	for i := range r.Slots() {
		s := r.Slot(i)
		for j := range s {
			s[j] = byte(i + 1)
		}
	}
	for i := range r.Slots() {
		for j, b := range r.Slot(i) {
			if b != byte(i+1) {
				t.Fatalf("slot %d byte %d = %d: slots overlap", i, j, b)
			}
		}
	}
}

func testConsumerSees(t *testing.T, impl Impl) {
	r := mustRing(t, impl, 3, 5000)
	for round := range 2 {
		for i := range r.Slots() {
			s := r.Slot(i)
			for j := range s {
				s[j] = byte(j*7 + i*13 + round)
			}
			if c, ok := r.(committer); ok {
				if err := c.Commit(i); err != nil {
					t.Fatal(err)
				}
			}
		}
		for i := range r.Slots() {
			want := make([]byte, r.SlotBytes())
			for j := range want {
				want[j] = byte(j*7 + i*13 + round)
			}
			if got := consumerView(t, impl, r, i); !bytes.Equal(got, want) {
				t.Fatalf("round %d: a consumer does not see slot %d as written", round, i)
			}
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	impl.after(t, r)
}

func testBadGeometry(t *testing.T, impl Impl) {
	for _, g := range [][2]int{{1, 100}, {4, 0}, {2, -1}, {1 << 20, 1 << 20}} {
		if r, err := impl.Make(t, g[0], g[1]); !errors.Is(err, ring.ErrGeometry) {
			t.Errorf("%d slots of %d bytes: err %v, want ErrGeometry", g[0], g[1], err)
			if err == nil {
				r.Close()
			}
		}
	}
	impl.after(t, nil)
}

func testCloseTwice(t *testing.T, impl Impl) {
	r := mustRing(t, impl, 2, 100)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	impl.after(t, r)
}
