package source

// prefetch hints that the cache line at addr will be read soon. Implemented
// in prefetch_amd64.s.
//
//go:noescape
func prefetch(addr uintptr)
