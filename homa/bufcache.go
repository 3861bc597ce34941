package homa

import (
	"slices"
	"sync"
	"sync/atomic"
)

// Each endpoint keeps a small cache of buffers in front of the process's
// pool, for the buffers its core takes and frees itself: packet headers,
// incoming messages' storage, outgoing copies. The core runs under the
// endpoint's mutex, so whichever goroutine (and CPU) holds it uses the
// cache without a lock of its own, and endpoints on different CPUs do not
// meet on the pool's locks for those buffers. The cache trades with the
// pool half a class's limit at a time. Buffers that leave the core
// (Messages, Holds, written packets) go back to the pool directly, from
// whatever goroutine releases them.
//
// A cache holds at most cacheClassBytes (and at most cacheMax buffers) of
// each class up to 64 KiB; larger buffers bypass it. Like the pool, it
// gives back at each of the endpoint's trims what the interval did not
// need (each class's low-water mark), to the pool, which lets them go at
// its own next trims; and everything when the endpoint closes. Its gets,
// and the bytes it holds, are counted in BufferStats as they change,
// through the registry of open caches.
const (
	cacheMaxShift   = 16
	cacheClassBytes = 128 << 10
	cacheMax        = 32
)

type bufCache struct {
	classes [cacheMaxShift - minClassShift + 1]cacheClass
	// gets counts the buffers the cache handed out. Only the cache's
	// owner adds to it; ReadBufferStats reads it.
	gets atomic.Uint64
	// held is the capacity of the buffers the cache holds.
	held atomic.Int64
}

type cacheClass struct {
	free [][]byte
	// low is the fewest buffers free held since the last trim.
	low int
}

// caches registers the open caches, for ReadBufferStats.
var caches struct {
	mu   sync.Mutex
	open map[*bufCache]struct{}
	// closedGets is the gets of the caches closed so far.
	closedGets uint64
}

// register adds b to the open caches.
func (b *bufCache) register() {
	caches.mu.Lock()
	if caches.open == nil {
		caches.open = make(map[*bufCache]struct{})
	}
	caches.open[b] = struct{}{}
	caches.mu.Unlock()
}

// close gives every cached buffer back to the pool and takes b out of
// the open caches, its gets counted with the closed ones.
func (b *bufCache) close() {
	b.flush()
	caches.mu.Lock()
	if _, ok := caches.open[b]; ok {
		delete(caches.open, b)
		caches.closedGets += b.gets.Load()
	}
	caches.mu.Unlock()
}

// cachedGets is the gets of every cache, open or closed, and held the
// bytes the open ones hold.
func cachedGets() (gets, held uint64) {
	caches.mu.Lock()
	defer caches.mu.Unlock()
	gets = caches.closedGets
	for b := range caches.open {
		gets += b.gets.Load()
		held += uint64(max(b.held.Load(), 0))
	}
	return gets, held
}

func cacheLimit(c int) int { return min(cacheMax, max(2, cacheClassBytes>>(c+minClassShift))) }

// Get returns a buffer of length n (0 <= n <= 1 MiB). The caller holds
// the endpoint's mutex.
func (b *bufCache) Get(n int) []byte {
	c := sizeClass(n)
	if c >= len(b.classes) {
		return getBuf(n)
	}
	cc := &b.classes[c]
	if len(cc.free) == 0 {
		b.refill(c)
	}
	k := len(cc.free)
	if k == 0 {
		return getBuf(n) // the pool is empty too: it allocates, and counts
	}
	buf := cc.free[k-1]
	cc.free[k-1] = nil
	cc.free = cc.free[:k-1]
	cc.low = min(cc.low, k-1)
	b.gets.Add(1)
	b.held.Add(-int64(cap(buf)))
	return buf[:n]
}

// Put takes back a buffer from Get or from the pool. The caller holds
// the endpoint's mutex and must not use buf afterwards.
func (b *bufCache) Put(buf []byte) {
	c := sizeClass(cap(buf))
	if c >= len(b.classes) || cap(buf) != 1<<(c+minClassShift) {
		putBuf(buf)
		return
	}
	cc := &b.classes[c]
	if len(cc.free) >= cacheLimit(c) {
		b.spill(c, cacheLimit(c)/2, false)
	}
	cc.free = append(cc.free, buf[:0])
	b.held.Add(int64(cap(buf)))
}

// flush returns every cached buffer to the pool.
func (b *bufCache) flush() {
	for c := range b.classes {
		b.spill(c, len(b.classes[c].free), false)
	}
}

// trim gives the pool the buffers of each class that went unused since
// the last trim, and reports whether the cache still holds any. The
// caller holds the endpoint's mutex.
func (b *bufCache) trim() bool {
	holds := false
	for c := range b.classes {
		cc := &b.classes[c]
		if n := min(cc.low, len(cc.free)); n > 0 {
			// The list is a stack: give its bottom, the least recently
			// used, by moving it to the top.
			k := len(cc.free) - n
			slices.Reverse(cc.free)
			slices.Reverse(cc.free[:k])
			b.spill(c, n, true)
		}
		cc.low = len(cc.free)
		holds = holds || cc.low > 0
	}
	return holds
}

// refill takes up to half class c's limit from the pool's free list,
// under one acquisition of its lock.
func (b *bufCache) refill(c int) {
	cc := &b.classes[c]
	bc := &bufClasses[c]
	bc.mu.Lock()
	k := min(len(bc.free), cacheLimit(c)/2)
	from := bc.free[len(bc.free)-k:]
	cc.free = append(cc.free, from...)
	clear(from)
	bc.free = bc.free[:len(bc.free)-k]
	bc.mu.Unlock()
	b.held.Add(int64(k) << (c + minClassShift))
}

// spill gives the pool the k buffers on top of class c's list; those
// beyond the pool's own limit go to the GC. Idle buffers (a trim's) count
// as unused in the pool's interval too: its next trim lets them go.
func (b *bufCache) spill(c, k int, idle bool) {
	cc := &b.classes[c]
	b.held.Add(-int64(k) << (c + minClassShift))
	bc := &bufClasses[c]
	out := cc.free[len(cc.free)-k:]
	bc.mu.Lock()
	keep := min(k, max(0, classLimit(c)-len(bc.free)))
	bc.free = append(bc.free, out[:keep]...)
	if idle {
		bc.low += keep
	}
	bc.discards += uint64(k - keep)
	bc.mu.Unlock()
	clear(out)
	cc.free = cc.free[:len(cc.free)-k]
}
