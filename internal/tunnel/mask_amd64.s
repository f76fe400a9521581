#include "textflag.h"

// func xorAVX2(dst, src *byte, n int, k64 uint64)
//
// n is a multiple of 32. Each block is loaded before it is stored, so dst
// may be src. 128 bytes a round while they last, then 32.
TEXT ·xorAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ k64+24(FP), AX
	MOVQ AX, X0
	VPBROADCASTQ X0, Y0

loop128:
	CMPQ CX, $128
	JB   loop32
	VPXOR   (SI), Y0, Y1
	VPXOR   32(SI), Y0, Y2
	VPXOR   64(SI), Y0, Y3
	VPXOR   96(SI), Y0, Y4
	VMOVDQU Y1, (DI)
	VMOVDQU Y2, 32(DI)
	VMOVDQU Y3, 64(DI)
	VMOVDQU Y4, 96(DI)
	ADDQ    $128, SI
	ADDQ    $128, DI
	SUBQ    $128, CX
	JMP     loop128

loop32:
	CMPQ CX, $32
	JB   done
	VPXOR   (SI), Y0, Y1
	VMOVDQU Y1, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $32, CX
	JMP     loop32

done:
	VZEROUPPER
	RET
