package cuda

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// ringImpl makes one kind of Ring for the shared suite, and says how a
// client sees a slot: through the file for shm, through the IPC handle for a
// device ring, directly for a memory ring.
type ringImpl struct {
	name string
	make func(t *testing.T, slots, slotBytes int) (Ring, error)
	// client returns what a reader of the ring sees in slot i, after the
	// producer wrote it and committed it where the ring needs that.
	client func(t *testing.T, r Ring, i int) []byte
	// after checks, once the ring is closed, that it left nothing behind.
	after func(t *testing.T, r Ring)
}

func ringImpls() []ringImpl {
	fake := NewFakeDriver()
	devs := NewDevices(fake)
	return []ringImpl{{
		name:   "mem",
		make:   func(t *testing.T, n, b int) (Ring, error) { return NewMemRing(n, b) },
		client: func(t *testing.T, r Ring, i int) []byte { return r.Slot(i) },
		after:  func(t *testing.T, r Ring) {},
	}, {
		name: "shm",
		make: func(t *testing.T, n, b int) (Ring, error) { return NewShmRing(t.TempDir(), "ring", n, b, 1) },
		client: func(t *testing.T, r Ring, i int) []byte {
			f, err := os.Open(r.Path())
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			off := r.(*ShmRing).DataOffset() + i*r.Stride()
			m, err := unix.Mmap(int(f.Fd()), int64(off), r.SlotBytes(), unix.PROT_READ, unix.MAP_SHARED)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { unix.Munmap(m) })
			return m
		},
		after: func(t *testing.T, r Ring) {
			if r == nil {
				return
			}
			if _, err := os.Stat(r.Path()); !os.IsNotExist(err) {
				t.Errorf("ring file left after Close: %v", err)
			}
		},
	}, {
		name: "device-on-fake",
		make: func(t *testing.T, n, b int) (Ring, error) { return devs.NewRing(1, n, b) },
		client: func(t *testing.T, r Ring, i int) []byte {
			mem, err := fake.OpenIPC(r.(*DeviceRing).IPCHandle(1))
			if err != nil {
				t.Fatal(err)
			}
			return mem[i*r.Stride() : i*r.Stride()+r.SlotBytes()]
		},
		after: func(t *testing.T, r Ring) {
			if c := fake.Counts(); c.DeviceAllocs+c.HostAllocs+c.Streams+c.Events+c.Contexts != 0 {
				t.Errorf("fake driver holds %+v after Close", c)
			}
		},
	}}
}

// TestRingSuite checks the contract every Ring keeps, for each kind.
func TestRingSuite(t *testing.T) {
	for _, impl := range ringImpls() {
		t.Run(impl.name, func(t *testing.T) {
			t.Run("Geometry", func(t *testing.T) { testGeometry(t, impl) })
			t.Run("SlotsAreDisjoint", func(t *testing.T) { testDisjoint(t, impl) })
			t.Run("ClientSeesCommittedSlot", func(t *testing.T) { testClientSees(t, impl) })
			t.Run("BadGeometry", func(t *testing.T) { testBadGeometry(t, impl) })
			t.Run("CloseTwice", func(t *testing.T) { testCloseTwice(t, impl) })
		})
	}
}

func mustRing(t *testing.T, impl ringImpl, slots, slotBytes int) Ring {
	t.Helper()
	r, err := impl.make(t, slots, slotBytes)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// commit makes slot i visible to clients where the ring needs that.
func commit(t *testing.T, r Ring, i int) {
	t.Helper()
	if c, ok := r.(Committer); ok {
		if err := c.Commit(i); err != nil {
			t.Fatal(err)
		}
	}
}

func testGeometry(t *testing.T, impl ringImpl) {
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

func testDisjoint(t *testing.T, impl ringImpl) {
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

func testClientSees(t *testing.T, impl ringImpl) {
	r := mustRing(t, impl, 3, 5000)
	for round := range 2 {
		for i := range r.Slots() {
			s := r.Slot(i)
			for j := range s {
				s[j] = byte(j*7 + i*13 + round)
			}
			commit(t, r, i)
		}
		for i := range r.Slots() {
			want := make([]byte, r.SlotBytes())
			for j := range want {
				want[j] = byte(j*7 + i*13 + round)
			}
			if got := impl.client(t, r, i); !bytes.Equal(got, want) {
				t.Fatalf("round %d: a client does not see slot %d as written", round, i)
			}
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	impl.after(t, r)
}

func testBadGeometry(t *testing.T, impl ringImpl) {
	for _, g := range [][2]int{{1, 100}, {4, 0}, {2, -1}, {1 << 20, 1 << 20}} {
		if r, err := impl.make(t, g[0], g[1]); !errors.Is(err, ErrGeometry) {
			t.Errorf("%d slots of %d bytes: err %v, want ErrGeometry", g[0], g[1], err)
			if err == nil {
				r.Close()
			}
		}
	}
	impl.after(t, nil)
}

func testCloseTwice(t *testing.T, impl ringImpl) {
	r := mustRing(t, impl, 2, 100)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	impl.after(t, r)
}

func TestShmRingFile(t *testing.T) {
	dir := t.TempDir()
	r, err := NewShmRing(dir, "ring", 3, 5000, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	fi, err := os.Stat(r.Path())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("ring file mode %v, want 0600", fi.Mode().Perm())
	}
	if _, err := NewShmRing(dir, "ring", 3, 5000, 1); err == nil {
		t.Fatal("creating an existing ring file succeeded")
	}
}

func TestShmRingNeedsAConsumer(t *testing.T) {
	if _, err := NewShmRing(t.TempDir(), "r", 2, 100, 0); !errors.Is(err, ErrGeometry) {
		t.Errorf("0 consumers: err %v, want ErrGeometry", err)
	}
}

func TestMemRingHasNoPath(t *testing.T) {
	r, err := NewMemRing(3, 5000)
	if err != nil {
		t.Fatal(err)
	}
	if r.Path() != "" {
		t.Fatalf("memory ring has path %q", r.Path())
	}
}
