#include "textflag.h"

// func prefetch(addr uintptr)
// Asks the CPU to bring the cache line at addr into all cache levels.
// A prefetch never faults, whatever the address.
TEXT ·prefetch(SB), NOSPLIT, $0-8
	MOVQ       addr+0(FP), AX
	PREFETCHT0 (AX)
	RET
