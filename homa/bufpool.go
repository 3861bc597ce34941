package homa

import (
	"math/bits"
	"runtime/debug"
	"sync"
	"time"

	"github.com/homa-go/homa/contract"
)

// Message buffers are recycled through bounded free lists, one per
// power-of-two size class from 256 B up to 1 MiB (>= MaxMessage), so that
// an RPC costs no allocation in steady state. A list keeps at most
// poolClassBytes of buffers (and at least 4); the rest go to the GC.
const (
	minClassShift  = 8
	maxClassShift  = 20
	poolClassBytes = 8 << 20
)

type bufClass struct {
	mu   sync.Mutex
	free [][]byte
	// low is the fewest buffers the free list held since the last trim:
	// that many were not needed in the interval.
	low int
	// Counted under mu, which every get and put takes anyway.
	gets, allocs, discards, trimmed uint64
}

var bufClasses [maxClassShift - minClassShift + 1]bufClass

func sizeClass(n int) int {
	if n <= 1<<minClassShift {
		return 0
	}
	return bits.Len(uint(n-1)) - minClassShift
}

func classLimit(c int) int { return max(4, poolClassBytes>>(c+minClassShift)) }

// getBuf returns a buffer of length n (0 <= n <= 1 MiB).
func getBuf(n int) []byte {
	c := sizeClass(n)
	bc := &bufClasses[c]
	bc.mu.Lock()
	bc.gets++
	if k := len(bc.free); k > 0 {
		b := bc.free[k-1]
		bc.free[k-1] = nil
		bc.free = bc.free[:k-1]
		bc.low = min(bc.low, k-1)
		bc.mu.Unlock()
		return b[:n]
	}
	bc.allocs++
	bc.mu.Unlock()
	return make([]byte, n, 1<<(c+minClassShift))
}

// putBuf recycles a buffer obtained from getBuf. The caller must not use
// it afterwards. Buffers of other capacities are left to the GC.
func putBuf(b []byte) {
	c := sizeClass(cap(b))
	if cap(b) != 1<<(c+minClassShift) || c >= len(bufClasses) {
		return
	}
	bc := &bufClasses[c]
	bc.mu.Lock()
	if len(bc.free) < classLimit(c) {
		bc.free = append(bc.free, b[:0])
	} else {
		bc.discards++
	}
	bc.mu.Unlock()
}

// The pool gives back what load left in it. About every trimEvery while
// it holds free buffers, each class lets go of those it did not need in
// the interval (its low-water mark): a pool in steady use keeps what it
// uses, and one left idle after a burst empties within two intervals. The endpoints' timers call trimPool (see Endpoint.trimDue),
// so no goroutine or timer of its own is needed, and an endpoint stops
// asking once the pool is empty. When a trim empties the pool after it
// let go of trimReturn bytes, the memory goes back to the operating
// system at once rather than at the runtime's own pace.
const (
	trimEvery  = time.Second
	trimReturn = 1 << 20
)

var trimState struct {
	mu       sync.Mutex
	last     time.Time
	released uint64 // bytes let go of since the last return to the OS
}

// trimPool trims the pool unless it was trimmed less than trimEvery ago,
// and reports whether it still holds free buffers.
func trimPool() (holds bool) {
	trimState.mu.Lock()
	defer trimState.mu.Unlock()
	now := time.Now()
	// A clock behind the last trim is another clock (a testing/synctest
	// bubble's, after a trim outside it): trim, rather than wait for it
	// to catch up.
	if d := now.Sub(trimState.last); d >= 0 && d < trimEvery {
		return poolHolds() // another endpoint trimmed it just now
	}
	trimState.last = now
	freed, left := trimClasses()
	trimState.released += freed
	if left == 0 && trimState.released >= trimReturn {
		trimState.released = 0
		debug.FreeOSMemory()
	}
	return left > 0
}

// poolHolds reports whether the pool holds free buffers.
func poolHolds() bool {
	for c := range bufClasses {
		bc := &bufClasses[c]
		bc.mu.Lock()
		n := len(bc.free)
		bc.mu.Unlock()
		if n > 0 {
			return true
		}
	}
	return false
}

// trimClasses lets go of each class's buffers unused since the last
// trim, oldest first, and returns the bytes let go of and those still
// free.
func trimClasses() (freed, left uint64) {
	for c := range bufClasses {
		bc := &bufClasses[c]
		size := uint64(1) << (c + minClassShift)
		bc.mu.Lock()
		if n := min(len(bc.free), bc.low); n > 0 {
			// The free list is a stack: its bottom holds the buffers
			// least recently used.
			k := copy(bc.free, bc.free[n:])
			clear(bc.free[k:])
			bc.free = bc.free[:k]
			bc.trimmed += uint64(n)
			freed += uint64(n) * size
		}
		if len(bc.free) == 0 {
			bc.free = nil // the list's own storage, grown by load
		}
		bc.low = len(bc.free)
		left += uint64(len(bc.free)) * size
		bc.mu.Unlock()
	}
	return freed, left
}

// ReadBufferStats returns a snapshot of the process's buffer pool.
func ReadBufferStats() contract.BufferStats {
	s := contract.BufferStats{}
	s.Gets, s.CachedBytes = cachedGets()
	for c := range bufClasses {
		bc := &bufClasses[c]
		size := uint64(1) << (c + minClassShift)
		bc.mu.Lock()
		s.Gets += bc.gets
		s.Allocs += bc.allocs
		s.AllocBytes += bc.allocs * size
		s.Discards += bc.discards
		s.Trimmed += bc.trimmed
		s.Free += uint64(len(bc.free))
		s.FreeBytes += uint64(len(bc.free)) * size
		bc.mu.Unlock()
	}
	return s
}

// pool is the process's buffer pool as the core's Buffers.
type pool struct{}

func (pool) Get(n int) []byte { return getBuf(n) }
func (pool) Put(b []byte)     { putBuf(b) }

// NewBuffer returns a buffer of length n from the process's pool of
// message buffers, for SendOwned and ReplyOwned: the endpoint sends from
// it and puts it back in the pool when the RPC is done with it, so that
// a program that builds each message in a buffer of its own allocates
// nothing in steady state. Its capacity is a power of two (at least
// 256); its bytes are not zeroed. Beyond 1 MiB it is a buffer of its
// own, which the pool does not take back.
func NewBuffer(n int) []byte {
	if n > 1<<maxClassShift {
		return make([]byte, n)
	}
	return getBuf(max(n, 0))
}

// FreeBuffer puts b, from NewBuffer and never handed to an endpoint,
// back in the pool; nothing may use b afterwards. Buffers of other
// capacities are left to the garbage collector.
func FreeBuffer(b []byte) { putBuf(b) }
