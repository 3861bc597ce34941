package homa_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/memnet"
)

// heapInuse is the heap in use after a collection.
func heapInuse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestMemoryAfterLoad: a bounded load (640 RPCs of 100 B to 500 KB, 16
// at a time) over the in-memory network leaves buffers in the pool and
// the endpoints' caches and RPC structures in the cores; a few seconds
// after it stops, the endpoints' trims have let all of it go, and once
// the server's record of the client port has expired (a minute after
// the port fell silent) and the idle peers too, the endpoints stop
// waking. The heap in use is logged (-v), not asserted: it depends on
// the collector.
func TestMemoryAfterLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := newMemPair(t, memnet.Config{Seed: 8}, homa.Config{})
		if err := p.call(context.Background(), t, payload(1, 100)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		start := heapInuse()
		var wg sync.WaitGroup
		sizes := []int{100, 1000, 10_000, 100_000, 500_000}
		for g := range 16 {
			wg.Go(func() {
				for i := range 40 {
					if err := p.call(context.Background(), t, payload(uint64(g*1000+i), sizes[(g+i)%len(sizes)])); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		loaded, bs := heapInuse(), homa.ReadBufferStats()
		spare := p.server.Stats().SpareRPCs + p.client.Stats().SpareRPCs
		if bs.FreeBytes+bs.CachedBytes == 0 || spare == 0 {
			t.Fatalf("right after the load the engine keeps nothing for reuse (%d bytes, %d RPCs): the test measures nothing", bs.FreeBytes+bs.CachedBytes, spare)
		}
		t.Logf("after load: heap in use %d KiB (%d KiB before), pool %d KiB, caches %d KiB, %d spare RPCs",
			loaded>>10, start>>10, bs.FreeBytes>>10, bs.CachedBytes>>10, spare)
		time.Sleep(5 * time.Second)
		idle, bs := heapInuse(), homa.ReadBufferStats()
		t.Logf("5 s later: heap in use %d KiB, pool %d KiB, caches %d KiB", idle>>10, bs.FreeBytes>>10, bs.CachedBytes>>10)
		if bs.FreeBytes != 0 || bs.CachedBytes != 0 {
			t.Errorf("5 s after the load the pool keeps %d bytes, the caches %d", bs.FreeBytes, bs.CachedBytes)
		}
		for _, e := range []*homa.Endpoint{p.server, p.client} {
			if st := e.Stats(); st.SpareRPCs != 0 {
				t.Errorf("%v keeps %d RPC structures 5 s after the load", e.LocalAddr(), st.SpareRPCs)
			}
		}
		if st := p.server.Stats(); st.SeenClients != 1 {
			t.Errorf("server remembers %d client ports, want the one", st.SeenClients)
		}
		time.Sleep(70 * time.Second)
		if st := p.server.Stats(); st.SeenClients != 0 || st.SeenExpired != 1 {
			t.Errorf("70 s later: %d client ports remembered, %d expired; want 0, 1", st.SeenClients, st.SeenExpired)
		}
		for _, e := range []*homa.Endpoint{p.server, p.client} {
			if st := e.Stats(); st.Peers != 0 || st.PeersExpired != 1 {
				t.Errorf("%v 70 s later: %d peers, %d expired; want 0, 1", e.LocalAddr(), st.Peers, st.PeersExpired)
			}
		}
		wakes := p.server.Stats().TimerWakeups + p.client.Stats().TimerWakeups
		time.Sleep(time.Minute)
		if w := p.server.Stats().TimerWakeups + p.client.Stats().TimerWakeups - wakes; w != 0 {
			t.Errorf("idle endpoints woke %d times in a minute", w)
		}
	})
}
