// Huge pages for the cache's blocks. A warm read copies out of the
// object's mapping; with 4 KiB pages a read of random blocks misses the
// TLB on most pages, and on a virtual machine a miss walks two page
// tables. A local file written at once is mapped in 2 MiB pages, so the
// cache copied at about 0.75 of its rate (docs/benchmarks.md, "Warm reads
// from the cache"). So a GET that fills a whole aligned extent (2 MiB,
// a PMD) first makes that extent one huge page of the backing, and the
// object is mapped at an address aligned to the extent, so the page is
// mapped whole:
//
//   - a memfd (the memory cache): MADV_COLLAPSE, which makes huge pages of
//     shmem whatever transparent_hugepage/shmem_enabled says (short of
//     "deny"), on the extent with one page written (an extent with none is
//     refused); the GET then writes into the huge page.
//   - a file in --object-cache-dir: the extent written with zeros in one
//     write, so that a file system with large folios (ext4, XFS) caches it
//     as one; the GET then writes into it.
//
// Only extents the GET fills whole are made huge, so the cache's memory is
// still the blocks it holds: an eviction punches its block out, which
// splits the huge page and gives the block's memory back (checked by
// TestHugeExtentsFollowTheBudget). Where the kernel or the file system
// cannot, the extent keeps small pages: only slower.

package objstore

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// extentBytes is the size of a huge page (a PMD): 2 MiB, or what the
// kernel says.
var extentBytes = sync.OnceValue(func() int64 {
	if b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size"); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 {
			return n
		}
	}
	return 2 << 20
})

// zeros is extentBytes of zeros that use no memory: an anonymous mapping
// never written (every page the kernel's zero page); nil when it cannot be
// made.
var zeros = sync.OnceValue(func() []byte {
	z, err := unix.Mmap(-1, 0, int(extentBytes()), unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil
	}
	return z
})

// mapAligned maps n bytes of fd from off for reading at an address that
// is a multiple of extentBytes: the kernel aligns file mappings of file
// systems with large folios itself, but not a memfd's where shmem_enabled
// is "never", and a huge page is mapped whole only at an aligned address.
// It reserves n plus an extent, maps the file over the reservation at the
// aligned address and gives back the rest.
func mapAligned(fd int, off, n int64) ([]byte, error) {
	ext := uintptr(extentBytes())
	size := uintptr(n)
	res, err := unix.MmapPtr(-1, 0, nil, size+ext, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, err
	}
	start := uintptr(res)
	at := (start + ext - 1) &^ (ext - 1)
	p, err := unix.MmapPtr(fd, off, unsafe.Add(res, at-start), size, unix.PROT_READ, unix.MAP_SHARED|unix.MAP_FIXED)
	if err != nil {
		unix.MunmapPtr(res, size+ext)
		return nil, err
	}
	if at > start {
		unix.MunmapPtr(res, at-start)
	}
	if end, tail := at+size, start+size+ext; tail > end {
		unix.MunmapPtr(unsafe.Add(res, end-start), tail-end)
	}
	return unsafe.Slice((*byte)(p), size), nil
}

// unmap ends a mapping of mapAligned.
func unmap(data []byte) error {
	return unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(data)), uintptr(len(data)))
}

// hugeExtents makes each whole extent of blocks [i, j] one huge page of
// the backing, before a GET fills them; best effort. It runs outside the
// store's lock, so it goes through the file (which stays open until it
// ends), not the object's mapping, which a drop may unmap meanwhile.
func (o *Object) hugeExtents(i, j int) {
	z := zeros()
	if o.file == nil || z == nil {
		return
	}
	ext := extentBytes()
	bs := o.store.opts.BlockSize
	from := (int64(i)*bs + ext - 1) / ext * ext
	to := min(int64(j+1)*bs, o.size) / ext * ext
	for off := from; off < to; off += ext {
		if o.store.opts.Dir != "" {
			o.file.WriteAt(z, off) // an error is the GET's to meet
			continue
		}
		if _, err := o.file.WriteAt(z[:os.Getpagesize()], off); err != nil {
			return
		}
		if raw, err := o.file.SyscallConn(); err == nil {
			raw.Control(func(fd uintptr) { collapse(int(fd), off, ext) })
		}
	}
}

// collapse makes bytes [off, off+n) of memfd fd one huge page, through a
// mapping of its own: MADV_COLLAPSE, which makes huge pages of shmem
// whatever shmem_enabled says (short of "deny"). The object's mapping
// maps the page whole at its next fault.
func collapse(fd int, off, n int64) {
	m, err := mapAligned(fd, off, n)
	if err != nil {
		return
	}
	unix.Madvise(m, unix.MADV_COLLAPSE)
	unmap(m)
}
