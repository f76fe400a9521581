package tunnel

import "sync"

// Chunks of received data come from pools by size, and go back once read:
// an idle stream holds no buffer. The sizes fit a small message, a TLS
// record (16 KiB and its overhead), and the frames of 64 KiB to 256 KiB
// that bulk senders write (a larger frame is received in pieces of
// maxFrame); the largest frame Tether writes fits with room for its
// headers, since a client's frames are built in one. Caches, not state.
var chunkSizes = [...]int{4 << 10, 17 << 10, 64 << 10, maxFrame + 64}

var chunkPools [len(chunkSizes)]sync.Pool

func getChunk(n int) *[]byte {
	for i, size := range chunkSizes {
		if n <= size {
			if p, ok := chunkPools[i].Get().(*[]byte); ok {
				*p = (*p)[:n]
				return p
			}
			b := make([]byte, n, size)
			return &b
		}
	}
	b := make([]byte, n)
	return &b
}

func putChunk(p *[]byte) {
	for i, size := range chunkSizes {
		if cap(*p) == size {
			chunkPools[i].Put(p)
			return
		}
	}
}
