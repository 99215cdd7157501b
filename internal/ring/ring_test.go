package ring_test

import (
	"errors"
	"os"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/ring"
	"github.com/dataloaderd/dataloaderd/internal/ring/ringtest"
)

// TestRingSuite checks the contract every Ring keeps, for the host rings
// (the device ring runs it in package session).
func TestRingSuite(t *testing.T) {
	t.Run("mem", func(t *testing.T) {
		ringtest.Run(t, ringtest.Impl{
			Make: func(t *testing.T, n, b int) (ring.Ring, error) { return ring.NewMemRing(n, b) },
		})
	})
	t.Run("shm", func(t *testing.T) {
		ringtest.Run(t, ringtest.Impl{
			Make: func(t *testing.T, n, b int) (ring.Ring, error) { return ring.NewShmRing(t.TempDir(), "ring", n, b, 1) },
			After: func(t *testing.T, r ring.Ring) {
				if r == nil {
					return
				}
				if _, err := os.Stat(r.Layout(0).Path); !os.IsNotExist(err) {
					t.Errorf("ring file left after Close: %v", err)
				}
			},
		})
	})
}

func TestShmRingFile(t *testing.T) {
	dir := t.TempDir()
	r, err := ring.NewShmRing(dir, "ring", 3, 5000, 1)
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
	if _, err := ring.NewShmRing(dir, "ring", 3, 5000, 1); err == nil {
		t.Fatal("creating an existing ring file succeeded")
	}
	l := r.Layout(0)
	if l.Path != r.Path() || l.ControlPath != r.Path() || l.DataOffset != r.DataOffset() || l.ControlBytes != r.DataOffset() || l.IPCHandle != nil {
		t.Fatalf("shm ring described as %+v", l)
	}
}

func TestShmRingNeedsAConsumer(t *testing.T) {
	if _, err := ring.NewShmRing(t.TempDir(), "r", 2, 100, 0); !errors.Is(err, ring.ErrGeometry) {
		t.Errorf("0 consumers: err %v, want ErrGeometry", err)
	}
}

func TestMemRingHasNoPath(t *testing.T) {
	r, err := ring.NewMemRing(3, 5000)
	if err != nil {
		t.Fatal(err)
	}
	if l := r.Layout(0); l.Path != "" || l.ControlPath != "" || r.Control() != nil {
		t.Fatalf("memory ring described as %+v", l)
	}
}
