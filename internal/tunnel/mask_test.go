package tunnel

import (
	"bytes"
	"fmt"
	"testing"
)

// TestMaskCopy checks both ways of masking against the rule itself, byte by
// byte: every length that exercises the vector blocks, the words and the
// bytes after them, every key position, buffers starting off a word's
// boundary, into another buffer and in place.
func TestMaskCopy(t *testing.T) {
	key := [4]byte{0x12, 0x34, 0x56, 0x78}
	src := make([]byte, 600)
	for i := range src {
		src[i] = byte(i * 7)
	}
	for _, impl := range []struct {
		name string
		mask func(dst, src []byte, key [4]byte, pos int) int
	}{{"maskCopy", maskCopy}, {"maskGo", maskGo}} {
		for n := range 300 {
			for pos := range 4 {
				for off := range 4 {
					in := src[off : off+n]
					want := make([]byte, n)
					for i := range want {
						want[i] = in[i] ^ key[(pos+i)&3]
					}
					got := make([]byte, n+off)[off:]
					if next := impl.mask(got, in, key, pos); next != (pos+n)&3 {
						t.Fatalf("%s n=%d pos=%d: next position %d, want %d", impl.name, n, pos, next, (pos+n)&3)
					}
					if !bytes.Equal(got, want) {
						t.Fatalf("%s n=%d pos=%d off=%d: masked %x, want %x", impl.name, n, pos, off, got, want)
					}
					inPlace := append(make([]byte, off), in...)[off:]
					impl.mask(inPlace, inPlace, key, pos)
					if !bytes.Equal(inPlace, want) {
						t.Fatalf("%s n=%d pos=%d off=%d: masked in place %x, want %x", impl.name, n, pos, off, inPlace, want)
					}
				}
			}
		}
	}
}

// BenchmarkMask compares maskCopy (vector blocks where the CPU has them)
// with maskGo in the same run, at the sizes the tunnel masks: an echo's
// frame, a TLS record, a bulk frame.
func BenchmarkMask(b *testing.B) {
	key := [4]byte{0x12, 0x34, 0x56, 0x78}
	for _, size := range []int{1 << 10, 16 << 10, maxFrame} {
		src, dst := make([]byte, size), make([]byte, size)
		for _, impl := range []struct {
			name string
			mask func(dst, src []byte, key [4]byte, pos int) int
		}{{"maskCopy", maskCopy}, {"maskGo", maskGo}} {
			b.Run(fmt.Sprintf("%s/%dKiB/copy", impl.name, size>>10), func(b *testing.B) {
				b.SetBytes(int64(size))
				for b.Loop() {
					impl.mask(dst, src, key, 1)
				}
			})
			b.Run(fmt.Sprintf("%s/%dKiB/inplace", impl.name, size>>10), func(b *testing.B) {
				b.SetBytes(int64(size))
				for b.Loop() {
					impl.mask(src, src, key, 1)
				}
			})
		}
	}
}
