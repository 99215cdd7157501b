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

// func copyInt32AVX2(dst *int32, src *int32, n int) (neg bool)
// Copies n int32 values (n a multiple of 16), 16 at a time, and reports
// whether any is negative: the sign bits are OR-ed in the same pass.
TEXT ·copyInt32AVX2(SB), NOSPLIT, $0-25
	MOVQ  dst+0(FP), DI
	MOVQ  src+8(FP), SI
	MOVQ  n+16(FP), CX
	VPXOR Y2, Y2, Y2
	SHRQ  $4, CX
	JZ    signs

copyloop:
	VMOVDQU (SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVDQU Y0, (DI)
	VMOVDQU Y1, 32(DI)
	VPOR    Y0, Y2, Y2
	VPOR    Y1, Y2, Y2
	ADDQ    $64, SI
	ADDQ    $64, DI
	DECQ    CX
	JNZ     copyloop

signs:
	VMOVMSKPS Y2, AX
	VZEROUPPER
	TESTL     AX, AX
	SETNE     ret+24(FP)
	RET
