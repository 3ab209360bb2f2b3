//go:build amd64 && !purego

#include "textflag.h"

// The byte shuffle of a frame's records in SSE2 (every amd64 has it), 16
// records of one 8-byte word column at a time; shuffle_amd64.go tells
// which records, frame.go what the shuffle is. Registers: AX, CX, BX point
// at planes j, j+2 and j+3 of the word column's first record of the
// block (N = n, the plane stride: planes j+1, j+4..j+7 are reached with
// N scaled); DX, R12 and R13 point at records 0, 2 and 3 of the block at
// the word column (R8 = w, the record stride; R14 = 8w); R10 is where AX
// stops; R11 is the word column's byte offset j.

// func unshuffle16(dst, src *byte, w, n, n16 int)
TEXT ·unshuffle16(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ w+16(FP), R8
	MOVQ n+24(FP), R9
	MOVQ R8, R14
	SHLQ $3, R14
	XORQ R11, R11

ucol:
	CMPQ R11, R8
	JGE  udone
	MOVQ R11, AX
	IMULQ R9, AX
	ADDQ SI, AX
	LEAQ (AX)(R9*2), CX
	LEAQ (CX)(R9*1), BX
	MOVQ n16+32(FP), R10
	ADDQ AX, R10
	LEAQ (DI)(R11*1), DX
	LEAQ (DX)(R8*2), R12
	LEAQ (R12)(R8*1), R13

uloop:
	CMPQ AX, R10
	JGE  unext
	MOVOU (AX), X0
	MOVOU (AX)(R9*1), X1
	MOVOU (CX), X2
	MOVOU (BX), X3
	MOVOU (AX)(R9*4), X4
	MOVOU (BX)(R9*2), X5
	MOVOU (CX)(R9*4), X6
	MOVOU (BX)(R9*4), X7

	// Bytes of planes j, j+1 interleaved (and so on): X0 records 0-7, X8 8-15.
	MOVO      X0, X8
	PUNPCKLBW X1, X0
	PUNPCKHBW X1, X8
	MOVO      X2, X9
	PUNPCKLBW X3, X2
	PUNPCKHBW X3, X9
	MOVO      X4, X10
	PUNPCKLBW X5, X4
	PUNPCKHBW X5, X10
	MOVO      X6, X11
	PUNPCKLBW X7, X6
	PUNPCKHBW X7, X11

	// Pairs of pairs: four bytes a record, four records a register.
	MOVO      X0, X1
	PUNPCKLWL X2, X0
	PUNPCKHWL X2, X1
	MOVO      X8, X3
	PUNPCKLWL X9, X8
	PUNPCKHWL X9, X3
	MOVO      X4, X5
	PUNPCKLWL X6, X4
	PUNPCKHWL X6, X5
	MOVO      X10, X7
	PUNPCKLWL X11, X10
	PUNPCKHWL X11, X7

	// Whole words, two records a register.
	MOVO      X0, X2
	PUNPCKLLQ X4, X0
	PUNPCKHLQ X4, X2
	MOVO      X1, X6
	PUNPCKLLQ X5, X1
	PUNPCKHLQ X5, X6
	MOVO      X8, X9
	PUNPCKLLQ X10, X8
	PUNPCKHLQ X10, X9
	MOVO      X3, X11
	PUNPCKLLQ X7, X3
	PUNPCKHLQ X7, X11

	MOVQ   X0, (DX)
	MOVHPS X0, (DX)(R8*1)
	MOVQ   X2, (R12)
	MOVHPS X2, (R13)
	MOVQ   X1, (DX)(R8*4)
	MOVHPS X1, (R13)(R8*2)
	MOVQ   X6, (R12)(R8*4)
	MOVHPS X6, (R13)(R8*4)
	ADDQ   R14, DX
	ADDQ   R14, R12
	ADDQ   R14, R13
	MOVQ   X8, (DX)
	MOVHPS X8, (DX)(R8*1)
	MOVQ   X9, (R12)
	MOVHPS X9, (R13)
	MOVQ   X3, (DX)(R8*4)
	MOVHPS X3, (R13)(R8*2)
	MOVQ   X11, (R12)(R8*4)
	MOVHPS X11, (R13)(R8*4)
	ADDQ   R14, DX
	ADDQ   R14, R12
	ADDQ   R14, R13

	ADDQ $16, AX
	ADDQ $16, BX
	ADDQ $16, CX
	JMP  uloop

unext:
	ADDQ $8, R11
	JMP  ucol

udone:
	RET

// func shuffle16(dst, src *byte, w, n, n16 int)
// dst is planes, src records: the pointers' roles swap (AX, CX, BX point
// into dst; DX, R12, R13 into src).
TEXT ·shuffle16(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ w+16(FP), R8
	MOVQ n+24(FP), R9
	MOVQ R8, R14
	SHLQ $3, R14
	XORQ R11, R11

scol:
	CMPQ R11, R8
	JGE  sdone
	MOVQ R11, AX
	IMULQ R9, AX
	ADDQ DI, AX
	LEAQ (AX)(R9*2), CX
	LEAQ (CX)(R9*1), BX
	MOVQ n16+32(FP), R10
	ADDQ AX, R10
	LEAQ (SI)(R11*1), DX
	LEAQ (DX)(R8*2), R12
	LEAQ (R12)(R8*1), R13

sloop:
	CMPQ AX, R10
	JGE  snext
	// Register k holds records 2k and 2k+1 (their words at column j).
	MOVQ   (DX), X0
	MOVHPS (DX)(R8*1), X0
	MOVQ   (R12), X1
	MOVHPS (R13), X1
	MOVQ   (DX)(R8*4), X2
	MOVHPS (R13)(R8*2), X2
	MOVQ   (R12)(R8*4), X3
	MOVHPS (R13)(R8*4), X3
	ADDQ   R14, DX
	ADDQ   R14, R12
	ADDQ   R14, R13
	MOVQ   (DX), X4
	MOVHPS (DX)(R8*1), X4
	MOVQ   (R12), X5
	MOVHPS (R13), X5
	MOVQ   (DX)(R8*4), X6
	MOVHPS (R13)(R8*2), X6
	MOVQ   (R12)(R8*4), X7
	MOVHPS (R13)(R8*4), X7
	ADDQ   R14, DX
	ADDQ   R14, R12
	ADDQ   R14, R13

	// Four rounds of interleaving bytes of register pairs (k, k+4),
	// (k, k+2), (k, k+1), (k, k+4): each moves one bit of a record's
	// index into a byte's position and one bit of the byte's plane into
	// the register's.
	MOVO      X0, X8
	PUNPCKLBW X4, X0
	PUNPCKHBW X4, X8
	MOVO      X1, X9
	PUNPCKLBW X5, X1
	PUNPCKHBW X5, X9
	MOVO      X2, X10
	PUNPCKLBW X6, X2
	PUNPCKHBW X6, X10
	MOVO      X3, X11
	PUNPCKLBW X7, X3
	PUNPCKHBW X7, X11

	MOVO      X0, X4
	PUNPCKLBW X2, X0
	PUNPCKHBW X2, X4
	MOVO      X1, X5
	PUNPCKLBW X3, X1
	PUNPCKHBW X3, X5
	MOVO      X8, X6
	PUNPCKLBW X10, X8
	PUNPCKHBW X10, X6
	MOVO      X9, X7
	PUNPCKLBW X11, X9
	PUNPCKHBW X11, X7

	MOVO      X0, X2
	PUNPCKLBW X1, X0
	PUNPCKHBW X1, X2
	MOVO      X4, X3
	PUNPCKLBW X5, X4
	PUNPCKHBW X5, X3
	MOVO      X8, X10
	PUNPCKLBW X9, X8
	PUNPCKHBW X9, X10
	MOVO      X6, X11
	PUNPCKLBW X7, X6
	PUNPCKHBW X7, X11

	MOVO      X0, X1
	PUNPCKLBW X8, X0
	PUNPCKHBW X8, X1
	MOVO      X2, X5
	PUNPCKLBW X10, X2
	PUNPCKHBW X10, X5
	MOVO      X4, X9
	PUNPCKLBW X6, X4
	PUNPCKHBW X6, X9
	MOVO      X3, X7
	PUNPCKLBW X11, X3
	PUNPCKHBW X11, X7

	// Plane j+p is in X0, X1, X2, X5, X4, X9, X3, X7 for p = 0..7.
	MOVOU X0, (AX)
	MOVOU X1, (AX)(R9*1)
	MOVOU X2, (CX)
	MOVOU X5, (BX)
	MOVOU X4, (AX)(R9*4)
	MOVOU X9, (BX)(R9*2)
	MOVOU X3, (CX)(R9*4)
	MOVOU X7, (BX)(R9*4)

	ADDQ $16, AX
	ADDQ $16, BX
	ADDQ $16, CX
	JMP  sloop

snext:
	ADDQ $8, R11
	JMP  scol

sdone:
	RET
