package tunnel

import "golang.org/x/sys/cpu"

// haveAVX2 is whether maskBlocks may use AVX2; read once, never changed.
var haveAVX2 = cpu.X86.HasAVX2

// maskBlocks XORs src with k64 into dst (as long as src, and either src
// itself or not overlapping it) in 32-byte blocks with AVX2, and returns
// how many bytes it did: none on a CPU without AVX2.
func maskBlocks(dst, src []byte, k64 uint64) int {
	n := len(src) &^ 31
	if !haveAVX2 || n == 0 {
		return 0
	}
	xorAVX2(&dst[0], &src[0], n, k64)
	return n
}

// xorAVX2 XORs n bytes (a multiple of 32) at src with k64, repeated, into
// dst.
//
//go:noescape
func xorAVX2(dst, src *byte, n int, k64 uint64)
