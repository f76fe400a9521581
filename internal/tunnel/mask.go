package tunnel

import "encoding/binary"

// maskCopy XORs src with the mask key into dst, which may be src, starting
// pos bytes into the key, and returns the position after. Every byte the
// agent sends and the hub receives goes through it once, so it is written
// for speed: 32 bytes at a time with AVX2 where the CPU has it (mask_amd64.s,
// two to five times maskGo's rate here; decision 021), then eight at a time.
func maskCopy(dst, src []byte, key [4]byte, pos int) int {
	dst = dst[:len(src)]
	k64 := maskWord(key, pos)
	i := maskBlocks(dst, src, k64) // a multiple of 8 bytes, so k64 still lines up
	maskWords(dst[i:], src[i:], k64)
	return (pos + len(src)) & 3
}

// maskGo is maskCopy without the vector instructions: what runs on other
// CPUs, and what the tests and benchmark compare the fast path with.
func maskGo(dst, src []byte, key [4]byte, pos int) int {
	dst = dst[:len(src)]
	maskWords(dst, src, maskWord(key, pos))
	return (pos + len(src)) & 3
}

// maskWord is the key, pos bytes in, as a little-endian word: the key
// repeats every four bytes, so a word holds it twice.
func maskWord(key [4]byte, pos int) uint64 {
	var k [8]byte
	for i := range k {
		k[i] = key[(pos+i)&3]
	}
	return binary.LittleEndian.Uint64(k[:])
}

// maskWords XORs src with the key word k64 into dst, eight bytes at a time.
func maskWords(dst, src []byte, k64 uint64) {
	n := len(src)
	dst = dst[:n]
	i := 0
	for ; i+32 <= n; i += 32 {
		s, d := src[i:i+32], dst[i:i+32]
		binary.LittleEndian.PutUint64(d[0:], binary.LittleEndian.Uint64(s[0:])^k64)
		binary.LittleEndian.PutUint64(d[8:], binary.LittleEndian.Uint64(s[8:])^k64)
		binary.LittleEndian.PutUint64(d[16:], binary.LittleEndian.Uint64(s[16:])^k64)
		binary.LittleEndian.PutUint64(d[24:], binary.LittleEndian.Uint64(s[24:])^k64)
	}
	for ; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(dst[i:], binary.LittleEndian.Uint64(src[i:])^k64)
	}
	for ; i < n; i++ {
		dst[i] = src[i] ^ byte(k64>>(8*(i&7)))
	}
}
