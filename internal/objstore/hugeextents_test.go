package objstore_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
)

const extent = 2 << 20

// TestHugeExtents: an object read whole through the cache, in memory and in
// a cache folder, is mapped in huge pages wherever a GET filled a whole
// aligned 2 MiB extent (the object's three), as a local file written at
// once is; its bytes are the object's. Skipped where the kernel (memfd) or
// the temp dir's file system (folder) gives no huge page to a probe made
// without the store.
func TestHugeExtents(t *testing.T) {
	for _, where := range []string{"memory", "disk"} {
		t.Run(where, func(t *testing.T) {
			opts := objstore.Options{MemoryBytes: 16 << 20}
			field := "ShmemPmdMapped"
			if where == "disk" {
				opts = objstore.Options{Dir: t.TempDir(), DiskBytes: 16 << 20}
				field = "FilePmdMapped"
				if !fileHugeProbe(t, opts.Dir) {
					t.Skip("the temp dir's file system maps no file in huge pages")
				}
			} else if !shmemCollapseProbe(t) {
				t.Skip("this kernel makes no huge page of a memfd (MADV_COLLAPSE)")
			}
			f := newFixture(t, 3*extent+5*block, opts)
			o := f.open(t)
			if got := read(t, o, 0, o.Size()); !bytes.Equal(got, f.data) {
				t.Fatal("the bytes read differ from the object's")
			}
			if got := mappedKiB(t, o.Data(), field); got < 3*extent>>10 {
				t.Fatalf("%s of the object's mapping: %d kB, want its 3 whole extents (%d kB)", field, got, 3*extent>>10)
			}
		})
	}
}

// TestHugeExtentsFollowTheBudget: in memory, a block evicted out of an
// extent made one huge page gives its memory back (the page is split), so
// the memfd holds the blocks cached and no more.
func TestHugeExtentsFollowTheBudget(t *testing.T) {
	if !shmemCollapseProbe(t) {
		t.Skip("this kernel makes no huge page of a memfd (MADV_COLLAPSE)")
	}
	f := newFixture(t, 3*extent, objstore.Options{MemoryBytes: 2 * extent})
	o := f.open(t)
	read(t, o, 0, 2*extent)
	if got := mappedKiB(t, o.Data(), "ShmemPmdMapped"); got != 2*extent>>10 {
		t.Fatalf("ShmemPmdMapped of 2 extents read: %d kB, want %d", got, 2*extent>>10)
	}
	if got := objstore.BackingBytes(o); got != 2*extent {
		t.Fatalf("the memfd holds %d bytes for 2 extents read, want %d", got, 2*extent)
	}
	read(t, o, 2*extent, block) // evicts block 0, the oldest read; no huge page for one block
	if st := f.store.Stats(); st.Evictions != 1 {
		t.Fatalf("evictions: %d, want 1", st.Evictions)
	}
	if got := objstore.BackingBytes(o); got != 2*extent {
		t.Fatalf("the memfd holds %d bytes after one block out and one in, want %d (the budget)", got, 2*extent)
	}
	if got := read(t, o, block, extent); !bytes.Equal(got, f.data[block:block+extent]) {
		t.Fatal("the bytes left in the split extent differ from the object's")
	}
}

// mappedKiB is the smaps field (kB) of the mapping that holds data.
func mappedKiB(t *testing.T, data []byte, field string) int64 {
	t.Helper()
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skip("no /proc/self/smaps:", err)
	}
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	in := false
	for line := range strings.Lines(string(smaps)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if !strings.HasSuffix(fields[0], ":") { // a mapping's first line: start-end perms ...
			var start, end uintptr
			fmt.Sscanf(fields[0], "%x-%x", &start, &end)
			in = start <= addr && addr < end
			continue
		}
		if in && fields[0] == field+":" && len(fields) > 1 {
			var kb int64
			fmt.Sscanf(fields[1], "%d", &kb)
			return kb
		}
	}
	t.Fatalf("no %s for the mapping at %#x in /proc/self/smaps", field, addr)
	return 0
}

// shmemCollapseProbe reports whether MADV_COLLAPSE makes a huge page of a
// memfd here, tried without the store: one page written, the memfd mapped
// at an aligned address over an anonymous reservation.
func shmemCollapseProbe(t *testing.T) bool {
	fd, err := unix.MemfdCreate("probe", unix.MFD_CLOEXEC)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	if unix.Ftruncate(fd, extent) != nil {
		return false
	}
	if _, err := unix.Pwrite(fd, make([]byte, 4096), 0); err != nil {
		return false
	}
	res, err := unix.Mmap(-1, 0, 2*extent, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return false
	}
	defer unix.Munmap(res) // the memfd's mapping too, which lies within
	skip := (extent - int(uintptr(unsafe.Pointer(&res[0]))%extent)) % extent
	p, err := unix.MmapPtr(fd, 0, unsafe.Pointer(&res[skip]), extent, unix.PROT_READ, unix.MAP_SHARED|unix.MAP_FIXED)
	if err != nil {
		return false
	}
	return unix.Madvise(unsafe.Slice((*byte)(p), extent), unix.MADV_COLLAPSE) == nil
}

// fileHugeProbe reports whether a file written at once in dir is mapped in
// huge pages.
func fileHugeProbe(t *testing.T, dir string) bool {
	path := filepath.Join(dir, "probe")
	defer os.Remove(path)
	if err := os.WriteFile(path, bytes.Repeat([]byte{1}, 2*extent), 0o600); err != nil {
		return false
	}
	fh, err := os.Open(path)
	if err != nil {
		return false
	}
	defer fh.Close()
	m, err := unix.Mmap(int(fh.Fd()), 0, 2*extent, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return false
	}
	defer unix.Munmap(m)
	sum := 0
	for off := 0; off < len(m); off += 4096 {
		sum += int(m[off])
	}
	return sum > 0 && mappedKiB(t, m, "FilePmdMapped") > 0
}
