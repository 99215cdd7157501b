package cuda

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestOpenDriverWithoutLibrary(t *testing.T) {
	lib := filepath.Join(t.TempDir(), "libcuda.so.1")
	_, err := OpenDriver(lib)
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("OpenDriver(%s): %v, want ErrNoDriver", lib, err)
	}
	if !strings.Contains(err.Error(), lib) || !strings.Contains(err.Error(), "shm and inline") {
		t.Fatalf("error %q does not name the library and what still works", err)
	}
}
