package homa

import (
	"context"
	"net/netip"
	"testing"
	"testing/synctest"
	"unsafe"

	"github.com/homa-go/homa/homa/memnet"
	"pgregory.net/rapid"
)

// poolFree is how many buffers the pool's free list of class c holds.
func poolFree(c int) int {
	bc := &bufClasses[c]
	bc.mu.Lock()
	defer bc.mu.Unlock()
	return len(bc.free)
}

// TestBufCache: a cache serves its gets and puts without the pool,
// trades with it half its limit at a time, never holds more than its
// limit, counts its gets in the pool's statistics, and gives
// everything back when it closes. No endpoint runs during this test, so
// the pool's counts are exact.
func TestBufCache(t *testing.T) {
	const n = 5000 // class 8192
	c := sizeClass(n)
	lim := cacheLimit(c)
	if lim < 4 || lim%2 != 0 {
		t.Fatalf("cacheLimit(%d) = %d: the test needs an even limit of 4 or more", c, lim)
	}
	// Give the pool a full cache's worth, so that nothing allocates.
	var held [][]byte
	for range 2 * lim {
		held = append(held, getBuf(n))
	}
	for _, b := range held {
		putBuf(b)
	}
	held = held[:0]

	var cache bufCache
	cache.register()
	free, stats := poolFree(c), ReadBufferStats()
	b := cache.Get(n)
	if len(b) != n || cap(b) != 8192 {
		t.Fatalf("Get(%d): len %d, cap %d", n, len(b), cap(b))
	}
	if got := poolFree(c); got != free-lim/2 {
		t.Fatalf("the first get took %d buffers from the pool, want %d", free-got, lim/2)
	}
	held = append(held, b)
	for range lim/2 - 1 {
		held = append(held, cache.Get(n))
	}
	if got := poolFree(c); got != free-lim/2 {
		t.Fatalf("gets the cache could serve took %d more from the pool", free-lim/2-got)
	}
	if s := ReadBufferStats(); s.Gets != stats.Gets+uint64(lim/2) || s.Allocs != stats.Allocs {
		t.Fatalf("%d gets from the cache: %+v, before %+v", lim/2, s, stats)
	}

	// Puts fill the cache to its limit without the pool; the next one
	// gives the pool half of it first.
	for range lim / 2 {
		held = append(held, getBuf(n))
	}
	free = poolFree(c)
	for _, h := range held {
		cache.Put(h)
	}
	if got := len(cache.classes[c].free); got != lim {
		t.Fatalf("the cache holds %d after %d puts, want %d", got, len(held), lim)
	}
	if got := poolFree(c); got != free {
		t.Fatalf("puts within the limit gave the pool %d", got-free)
	}
	cache.Put(getBuf(n))
	if got, want := len(cache.classes[c].free), lim/2+1; got != want {
		t.Fatalf("after a put beyond the limit the cache holds %d, want %d", got, want)
	}
	if got := poolFree(c); got != free-1+lim/2 {
		t.Fatalf("a put beyond the limit gave the pool %d, want %d", got-(free-1), lim/2)
	}

	free, stats = poolFree(c), ReadBufferStats()
	cache.close()
	if got := poolFree(c); got != free+lim/2+1 || len(cache.classes[c].free) != 0 {
		t.Fatalf("close gave the pool %d and kept %d, want %d and 0", got-free, len(cache.classes[c].free), lim/2+1)
	}
	if s := ReadBufferStats(); s.Gets != stats.Gets {
		t.Fatalf("closing the cache changed the gets from %d to %d", stats.Gets, s.Gets)
	}

	// Buffers above the cache's classes, and foreign ones, bypass it.
	big := cache.Get(1 << 20)
	cache.Put(big)
	cache.Put(make([]byte, 300))
	for i := range cache.classes {
		if len(cache.classes[i].free) != 0 {
			t.Fatalf("class %d caches %d buffers it should have passed on", i, len(cache.classes[i].free))
		}
	}
	if allocs := testing.AllocsPerRun(100, func() { cache.Put(cache.Get(n)) }); allocs != 0 {
		t.Fatalf("a cached get and put allocate %v times", allocs)
	}
	cache.flush()
}

// TestBufCacheStats: gets served by endpoints' caches show in
// BufferStats at once, and do not go away when the endpoints close.
func TestBufCacheStats(t *testing.T) {
	var a, b bufCache
	a.register()
	b.register()
	before := ReadBufferStats().Gets
	a.Put(a.Get(100))
	b.Put(b.Get(100))
	b.Put(b.Get(100))
	if got := ReadBufferStats().Gets - before; got != 3 {
		t.Fatalf("3 gets from two caches counted as %d", got)
	}
	a.close()
	b.close()
	b.close() // twice: nothing more
	if got := ReadBufferStats().Gets - before; got != 3 {
		t.Fatalf("after the caches closed, their 3 gets count as %d", got)
	}
}

// TestBufCacheEndpoint: an endpoint's core takes its buffers through
// the cache, and the cache is empty once the endpoint is closed.
func TestBufCacheEndpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 7, MTU: 1500})
		sc, _ := nw.Open(netip.MustParseAddr("10.0.0.1"), 0)
		cc, _ := nw.Open(netip.MustParseAddr("10.0.0.2"), 0)
		srv := NewEndpoint(sc, Config{PollDuration: -1})
		cl := NewEndpoint(cc, Config{PollDuration: -1})
		defer srv.Close()
		ctx := context.Background()
		go func() {
			for {
				m, err := srv.Recv(ctx, 0)
				if err != nil {
					return
				}
				srv.Reply(m.Peer.Addr(), m.ID, m.Data)
				m.Release()
			}
		}()
		dst := netip.AddrPortFrom(sc.LocalAddr(), sc.Port())
		for _, size := range []int{100, 3000, 20_000} {
			id, err := cl.Send(dst, make([]byte, size), 0)
			if err != nil {
				t.Fatal(err)
			}
			m, err := cl.Recv(ctx, id)
			if err != nil || len(m.Data) != size {
				t.Fatalf("%d bytes: %v", size, err)
			}
			m.Release()
		}
		cached := func(e *Endpoint) (n int) {
			e.mu.Lock()
			defer e.mu.Unlock()
			for i := range e.cache.classes {
				n += len(e.cache.classes[i].free)
			}
			return n
		}
		if cached(cl) == 0 {
			t.Fatal("the client's core took no buffer through its cache")
		}
		cl.Close()
		if n := cached(cl); n != 0 {
			t.Fatalf("a closed endpoint's cache holds %d buffers", n)
		}
	})
}

// TestBufCacheTrim: a trim gives the pool the buffers of a class that
// the interval since the last trim did not need, least recently used
// first, and keeps those it needed; the next trim of an idle cache
// empties it, and reports so.
func TestBufCacheTrim(t *testing.T) {
	var cache bufCache
	cache.register()
	defer cache.close()
	const size = 1000
	c := sizeClass(size)
	var held [][]byte
	for range 6 {
		held = append(held, cache.Get(size))
	}
	for _, b := range held {
		cache.Put(b)
	}
	oldest := unsafe.SliceData(cache.classes[c].free[0])
	if !cache.trim() || len(cache.classes[c].free) != 6 {
		t.Fatalf("after an interval that needed all 6, %d held", len(cache.classes[c].free))
	}
	b1, b2 := cache.Get(size), cache.Get(size) // an interval that needs 2
	cache.Put(b1)
	cache.Put(b2)
	if !cache.trim() || len(cache.classes[c].free) != 2 {
		t.Fatalf("after an interval that needed 2 of 6, %d held, want 2", len(cache.classes[c].free))
	}
	for _, b := range cache.classes[c].free {
		if unsafe.SliceData(b) == oldest {
			t.Error("the least recently used buffer was kept")
		}
	}
	if cache.trim() || len(cache.classes[c].free) != 0 || cache.held.Load() != 0 {
		t.Fatalf("after an idle interval, %d held (%d bytes)", len(cache.classes[c].free), cache.held.Load())
	}
}

// TestBufCacheProperties runs random gets, puts and flushes through a
// cache: a buffer is never handed out twice while it is held, every one
// has the length asked for and its class's capacity, and no class of the
// cache ever holds more than its limit.
func TestBufCacheProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var cache bufCache
		cache.register()
		defer cache.close()
		held := map[*byte][]byte{}
		var order []*byte // held, in the order taken, for Put to draw from
		sizes := rapid.SampledFrom([]int{1, 100, 256, 257, 1500, 4096, 5000, 40_000, 65_536, 70_000})
		t.Repeat(map[string]func(*rapid.T){
			"get": func(t *rapid.T) {
				n := sizes.Draw(t, "n")
				b := cache.Get(n)
				if len(b) != n || cap(b) != 1<<(sizeClass(n)+minClassShift) {
					t.Fatalf("Get(%d): len %d, cap %d", n, len(b), cap(b))
				}
				p := unsafe.SliceData(b)
				if _, dup := held[p]; dup {
					t.Fatalf("Get(%d) handed out a buffer that is held", n)
				}
				held[p] = b
				order = append(order, p)
			},
			"put": func(t *rapid.T) {
				if len(order) == 0 {
					t.Skip("nothing held")
				}
				i := rapid.IntRange(0, len(order)-1).Draw(t, "i")
				p := order[i]
				order = append(order[:i], order[i+1:]...)
				cache.Put(held[p])
				delete(held, p)
			},
			"flush": func(*rapid.T) { cache.flush() },
			"trim":  func(*rapid.T) { cache.trim() },
			"": func(t *rapid.T) {
				var bytes int64
				for c := range cache.classes {
					if k := len(cache.classes[c].free); k > cacheLimit(c) {
						t.Fatalf("class %d holds %d, more than its limit %d", c, k, cacheLimit(c))
					}
					for _, b := range cache.classes[c].free {
						bytes += int64(cap(b))
					}
				}
				if h := cache.held.Load(); h != bytes {
					t.Fatalf("the cache counts %d bytes held, holds %d", h, bytes)
				}
			},
		})
		for _, b := range held {
			putBuf(b)
		}
	})
}
