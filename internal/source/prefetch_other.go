//go:build !amd64

package source

// prefetch is a no-op where no prefetch instruction is wired.
func prefetch(addr uintptr) {}
