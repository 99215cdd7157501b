package cuda

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// ringSuite is run against every Ring implementation.
func ringSuite(t *testing.T, r Ring) {
	t.Helper()
	if r.Slots() != 3 || r.SlotBytes() != 5000 {
		t.Fatalf("geometry: %d slots of %d bytes, want 3 of 5000", r.Slots(), r.SlotBytes())
	}
	if r.Stride()%os.Getpagesize() != 0 || r.Stride() < r.SlotBytes() {
		t.Fatalf("stride %d is not a page multiple >= slot size", r.Stride())
	}
	for i := 0; i < r.Slots(); i++ {
		s := r.Slot(i)
		if len(s) != 5000 || cap(s) != 5000 {
			t.Fatalf("slot %d: len %d cap %d", i, len(s), cap(s))
		}
		for j := range s {
			s[j] = byte(i + 1)
		}
	}
	for i := 0; i < r.Slots(); i++ {
		for j, b := range r.Slot(i) {
			if b != byte(i+1) {
				t.Fatalf("slot %d byte %d = %d: slots overlap", i, j, b)
			}
		}
	}
}

func TestMemRing(t *testing.T) {
	r, err := NewMemRing(3, 5000)
	if err != nil {
		t.Fatal(err)
	}
	ringSuite(t, r)
	if r.Path() != "" {
		t.Fatalf("memory ring has path %q", r.Path())
	}
}

func TestShmRing(t *testing.T) {
	dir := t.TempDir()
	r, err := NewShmRing(dir, "ring", 3, 5000, 1)
	if err != nil {
		t.Fatal(err)
	}
	ringSuite(t, r)
	fi, err := os.Stat(r.Path())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("ring file mode %v, want 0600", fi.Mode().Perm())
	}
	// A second mapping of the file (a client) sees what the daemon wrote.
	f, err := os.Open(r.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, r.DataOffset()+3*r.Stride(), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	r.Slot(2)[7] = 99
	if m[r.DataOffset()+2*r.Stride()+7] != 99 {
		t.Fatal("a client mapping does not see the daemon's write")
	}
	if _, err := NewShmRing(dir, "ring", 3, 5000, 1); err == nil {
		t.Fatal("creating an existing ring file succeeded")
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.Path()); !os.IsNotExist(err) {
		t.Fatalf("ring file left after Close: %v", err)
	}
}

func TestBadGeometry(t *testing.T) {
	if _, err := NewShmRing(t.TempDir(), "r", 2, 100, 0); !errors.Is(err, ErrGeometry) {
		t.Errorf("0 consumers: err %v, want ErrGeometry", err)
	}
	for _, g := range [][2]int{{1, 100}, {4, 0}, {1 << 20, 1 << 20}} {
		if _, err := NewMemRing(g[0], g[1]); !errors.Is(err, ErrGeometry) {
			t.Errorf("%d slots of %d bytes: err %v, want ErrGeometry", g[0], g[1], err)
		}
		if _, err := NewShmRing(t.TempDir(), "r", g[0], g[1], 1); !errors.Is(err, ErrGeometry) {
			t.Errorf("shm %d slots of %d bytes: err %v, want ErrGeometry", g[0], g[1], err)
		}
	}
}
