package mapped

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestGuardTurnsATruncatedMappingIntoAnError: a file truncated under its
// mapping faults on the next read past its new end; under Guard that is an
// error naming the file, and the process lives.
func TestGuardTurnsATruncatedMappingIntoAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "corpus.bin")
	if err := os.WriteFile(path, make([]byte, 3*os.Getpagesize()), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, 3*os.Getpagesize(), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	Register(mem, path)
	defer func() { Unregister(mem); unix.Munmap(mem) }()
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	var sum byte
	err = Guard(func() error {
		for _, b := range mem[os.Getpagesize():] {
			sum += b
		}
		return nil
	})
	var fe *FaultError
	if !errors.As(err, &fe) || fe.Path != path || !errors.Is(err, ErrFault) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Guard: %v, want a fault naming %s", err, path)
	}
	if err := Guard(func() error { return nil }); err != nil {
		t.Fatalf("Guard of a function that does not fault: %v", err)
	}
	want := errors.New("mine")
	if err := Guard(func() error { return want }); err != want {
		t.Fatalf("Guard changed fn's error: %v", err)
	}
}

// TestPathFindsTheMapping: addresses inside registered mappings name their
// file; outside, none; unregistered mappings are forgotten.
func TestPathFindsTheMapping(t *testing.T) {
	a, b := make([]byte, 100), make([]byte, 50)
	Register(a, "a")
	Register(b, "b")
	addr := func(s []byte, i int) uintptr { return uintptrOf(s) + uintptr(i) }
	for _, c := range []struct {
		addr uintptr
		want string
	}{{addr(a, 0), "a"}, {addr(a, 99), "a"}, {addr(b, 49), "b"}} {
		if got, ok := Path(c.addr); !ok || got != c.want {
			t.Errorf("Path(%#x) = %q %v, want %q", c.addr, got, ok, c.want)
		}
	}
	Unregister(a)
	if got, ok := Path(addr(a, 5)); ok {
		t.Errorf("after Unregister, Path = %q", got)
	}
	Unregister(b)
}

// BenchmarkGuard is what Guard adds to each call it wraps (the producer
// makes one per batch, of tens of microseconds).
func BenchmarkGuard(b *testing.B) {
	n := 0
	for i := 0; i < b.N; i++ {
		_ = Guard(func() error { n++; return nil })
	}
	if n != b.N {
		b.Fatal(n)
	}
}
