package store

import (
	"unsafe"

	"github.com/tetherhq/tether/internal/protocol"
)

// What a summary costs the hub's heap, counted as Go's allocator and maps
// hold it: each string, map and slice the JSON decoder made is an
// allocation of its own, rounded up to a size class, and a map holds its
// entries in groups of eight slots that are at most 7/8 full. Counting only
// the strings' bytes, as the hub did first, undercounted the heap about
// twofold (issue 33); TestPerfAccountedBytesMatchTheHeap holds this within
// 20 % of the heap's growth, for real summaries and an agent's worst.

var (
	resourceBytes  = int(unsafe.Sizeof(protocol.Resource{}))
	conditionBytes = int(unsafe.Sizeof(protocol.Condition{}))
	kindStateBytes = int(unsafe.Sizeof(protocol.KindState{}))
	stringHeader   = int(unsafe.Sizeof(""))
	pointerBytes   = int(unsafe.Sizeof(uintptr(0)))
)

// stateSize is a state's own cost, and its maps' for a few kinds.
const stateSize = 1024

// resourceSize is what r costs, kept: the Resource, its entry and key in
// its kind's map, and everything it points to.
func resourceSize(r *protocol.Resource) int {
	n := allocSize(resourceBytes)
	n += entryShare(stringHeader+pointerBytes) + allocSize(len(r.Namespace)+1+len(r.Name))
	n += stringsSize(r.Kind, r.Namespace, r.Name, r.Owner, r.Phase, r.Replicas, r.Version, r.Sync, r.Health,
		r.Message, r.Object, r.Reason, r.LastSeen)
	if r.Labels != nil {
		n += allocSize(mapHeader) + mapSize(len(r.Labels), 2*stringHeader)
		for k, v := range r.Labels {
			n += stringSize(k) + stringSize(v)
		}
	}
	n += sliceSize(len(r.Conditions), conditionBytes)
	for _, c := range r.Conditions {
		n += stringsSize(c.Type, c.Status, c.Reason, c.Message)
	}
	n += sliceSize(len(r.Images), stringHeader) + stringsSize(r.Images...)
	n += sliceSize(len(r.Hosts), stringHeader) + stringsSize(r.Hosts...)
	n += sliceSize(len(r.Gateways), stringHeader) + stringsSize(r.Gateways...)
	n += sliceSize(len(r.Quota), stringHeader) + stringsSize(r.Quota...)
	return n
}

// kindsSize is what a list of kind states costs, kept.
func kindsSize(ks []protocol.KindState) int {
	n := sliceSize(len(ks), kindStateBytes)
	for _, k := range ks {
		n += stringsSize(k.Kind, k.Namespace, k.Error, k.Group, k.Resource)
	}
	return n
}

func stringsSize(ss ...string) int {
	n := 0
	for _, s := range ss {
		n += stringSize(s)
	}
	return n
}

// stringSize is a string's own allocation: none when empty, and strings
// under 16 bytes share 16-byte blocks (Go's tiny allocator).
func stringSize(s string) int {
	switch {
	case len(s) == 0:
		return 0
	case len(s) < 16:
		return len(s)
	}
	return allocSize(len(s))
}

// sliceSize is the backing array of n elements that the JSON decoder grew
// by appending: its capacity doubles, from one.
func sliceSize(n, elem int) int {
	if n == 0 {
		return 0
	}
	c := 1
	for c < n {
		c *= 2
	}
	return allocSize(c * elem)
}

// mapHeader is a map's own header.
const mapHeader = 48

// mapSize is the slots of a map of n entries of slot bytes each, grown one
// insertion at a time: up to eight fit one group; past that, tables whose
// slots double once they are 7/8 full.
func mapSize(n, slot int) int {
	group := 8 + 8*slot // eight control bytes, eight slots
	if n <= 8 {
		return allocSize(group)
	}
	slots := 16
	for n > slots*7/8 {
		slots *= 2
	}
	return allocSize(slots/8*group) + allocSize(mapHeader)
}

// entryShare is one entry's share of a large map's slots, on average over
// its growth: between 7/16 and 7/8 full, 8/7 × 1.5 slots and a control byte.
func entryShare(slot int) int {
	return (slot + 1) * 8 * 3 / 7 / 2
}

// allocSize is what Go's allocator takes for an object of n bytes: the
// next size class, or whole 8 KiB pages past the largest.
func allocSize(n int) int {
	if n <= 0 {
		return 0
	}
	if n > sizeClasses[len(sizeClasses)-1] {
		return (n + 8191) &^ 8191
	}
	lo, hi := 0, len(sizeClasses)-1
	for lo < hi {
		mid := (lo + hi) / 2
		if sizeClasses[mid] < n {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return sizeClasses[lo]
}

// sizeClasses are Go's (runtime/sizeclasses.go).
var sizeClasses = [...]int{
	8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256,
	288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280,
	1408, 1536, 1792, 2048, 2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528,
	6784, 6912, 8192, 9472, 9728, 10240, 10880, 12288, 13568, 14336, 16384, 18432, 19072,
	20480, 21760, 24576, 27264, 28672, 32768,
}
