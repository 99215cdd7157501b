// Package mapped names the files the daemon has mapped into memory, and
// turns a fault on such memory into an error that names the file.
//
// A mapped file that shrinks under its mapping (an operator's cp over a
// corpus file truncates it first; a client may truncate its own ring)
// makes every access past its new end raise SIGBUS, which by default kills
// the whole daemon and every session on the node. Guard runs code that
// touches mapped memory with the goroutine's panic-on-fault set, so the
// fault becomes an error of that one call, and so of the one session it
// served.
package mapped

import (
	"fmt"
	"runtime/debug"
	"sort"
	"sync"
	"unsafe"

	"github.com/dataloaderd/dataloaderd/internal/errkind"
)

// ErrFault: mapped memory could not be read or written: its file changed
// under the mapping.
var ErrFault = errkind.New(errkind.DataLoss, "mapped file changed under the daemon")

// FaultError is a fault at Addr, inside the mapping of Path (empty when no
// registered mapping holds it).
type FaultError struct {
	Path string
	Addr uintptr
}

func (e *FaultError) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("%v: fault at %#x", ErrFault, e.Addr)
	}
	return fmt.Sprintf("file %q changed while the daemon read or wrote it (truncated or replaced in place?): %v; replace a file in use by writing a new one and renaming it over the old", e.Path, ErrFault)
}

func (e *FaultError) Unwrap() error { return ErrFault }

type span struct {
	start, end uintptr
	path       string
}

var (
	mu    sync.RWMutex
	spans []span // sorted by start, disjoint
)

// Register records that mem maps path.
func Register(mem []byte, path string) {
	if len(mem) == 0 {
		return
	}
	start := uintptrOf(mem)
	s := span{start: start, end: start + uintptr(len(mem)), path: path}
	mu.Lock()
	defer mu.Unlock()
	i := sort.Search(len(spans), func(i int) bool { return spans[i].start >= s.start })
	spans = append(spans, span{})
	copy(spans[i+1:], spans[i:])
	spans[i] = s
}

// Unregister forgets the mapping mem, before it is unmapped.
func Unregister(mem []byte) {
	if len(mem) == 0 {
		return
	}
	start := uintptrOf(mem)
	mu.Lock()
	defer mu.Unlock()
	i := sort.Search(len(spans), func(i int) bool { return spans[i].start >= start })
	if i < len(spans) && spans[i].start == start {
		spans = append(spans[:i], spans[i+1:]...)
	}
}

// Path is the file whose registered mapping holds addr.
func Path(addr uintptr) (string, bool) {
	mu.RLock()
	defer mu.RUnlock()
	i := sort.Search(len(spans), func(i int) bool { return spans[i].end > addr })
	if i < len(spans) && spans[i].start <= addr {
		return spans[i].path, true
	}
	return "", false
}

// Guard runs fn; a memory fault in it (SIGBUS on a mapped file cut short,
// or a bad address) returns a *FaultError instead of killing the process.
// Other panics go on. Code that holds locks while it touches mapped memory
// must release them in defers, since a fault unwinds it.
func Guard(fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		r := recover()
		if r == nil {
			return
		}
		fault, ok := r.(interface{ Addr() uintptr })
		if !ok {
			panic(r)
		}
		path, _ := Path(fault.Addr())
		err = &FaultError{Path: path, Addr: fault.Addr()}
	}()
	return fn()
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
