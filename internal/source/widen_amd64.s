#include "textflag.h"

// func widenUint16AVX2(dst *int32, src *uint16, n int)
// Zero-extends n uint16 values (n a multiple of 16) to int32, 16 at a time.
TEXT ·widenUint16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   done

loop:
	VPMOVZXWD (SI), Y0
	VPMOVZXWD 16(SI), Y1
	VMOVDQU   Y0, (DI)
	VMOVDQU   Y1, 32(DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	DECQ      CX
	JNZ       loop
	VZEROUPPER

done:
	RET
