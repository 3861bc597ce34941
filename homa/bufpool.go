package homa

import (
	"math/bits"
	"sync"

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
	// Counted under mu, which every get and put takes anyway.
	gets, allocs, discards uint64
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

// ReadBufferStats returns a snapshot of the process's buffer pool.
func ReadBufferStats() contract.BufferStats {
	s := contract.BufferStats{Gets: cachedGets()}
	for c := range bufClasses {
		bc := &bufClasses[c]
		size := uint64(1) << (c + minClassShift)
		bc.mu.Lock()
		s.Gets += bc.gets
		s.Allocs += bc.allocs
		s.AllocBytes += bc.allocs * size
		s.Discards += bc.discards
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
