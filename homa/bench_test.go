package homa_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/homa/netio"
)

// benchRPC measures one 100-byte request/response at a time, the client's
// Send+Recv against an echo server, reporting allocations per RPC.
func benchRPC(b *testing.B, open func(addr netip.Addr, port uint16) (netio.Conn, error), host string) {
	benchRPCSize(b, open, host, 100)
}

func benchRPCSize(b *testing.B, open func(addr netip.Addr, port uint16) (netio.Conn, error), host string, size int) {
	addr := netip.MustParseAddr(host)
	sc, err := open(addr, 23000)
	if errors.Is(err, netio.ErrPermission) {
		b.Skip(err)
	}
	if err != nil {
		b.Fatal(err)
	}
	cc, err := open(addr, 0)
	if err != nil {
		b.Fatal(err)
	}
	p := startPair(b, homa.NewEndpoint(sc, homa.Config{}), homa.NewEndpoint(cc, homa.Config{}))
	req := make([]byte, size)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		id, err := p.client.Send(p.dst, req, 0)
		if err != nil {
			b.Fatal(err)
		}
		m, err := p.client.Recv(ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		m.Release()
	}
}

func BenchmarkRPC100Mem(b *testing.B) {
	nw := memnet.New(memnet.Config{})
	benchRPC(b, nw.Open, "10.0.0.1")
}

func BenchmarkRPC100Raw4(b *testing.B) {
	benchRPC(b, func(a netip.Addr, p uint16) (netio.Conn, error) { return netio.OpenRaw(a, p, nil) }, "127.0.0.1")
}

func BenchmarkRPC100UDP4(b *testing.B) {
	benchRPC(b, func(a netip.Addr, p uint16) (netio.Conn, error) { return netio.OpenUDP(a, p, nil) }, "127.0.0.1")
}

// BenchmarkRPC200KMem: 200,000 bytes each way over a 1500-byte MTU (140
// packets and a dozen grants per message): allocations per RPC must not
// grow with the packet count.
func BenchmarkRPC200KMem(b *testing.B) {
	nw := memnet.New(memnet.Config{MTU: 1500})
	benchRPCSize(b, nw.Open, "10.0.0.1", 200_000)
}

// BenchmarkRPC1MUDP4 and BenchmarkRPC1MRaw4: 1,000,000 bytes each way
// on loopback, one process.
func BenchmarkRPC1MUDP4(b *testing.B) {
	benchRPCSize(b, func(a netip.Addr, p uint16) (netio.Conn, error) { return netio.OpenUDP(a, p, nil) }, "127.0.0.1", 1_000_000)
}

func BenchmarkRPC1MRaw4(b *testing.B) {
	benchRPCSize(b, func(a netip.Addr, p uint16) (netio.Conn, error) { return netio.OpenRaw(a, p, nil) }, "127.0.0.1", 1_000_000)
}

// BenchmarkLossMem reports RPC completion time (p50, p99) against the
// loss rate of every packet type on the in-memory network (1500-byte MTU,
// no added delay), for 100 B and 100 KB RPCs, 4 at a time. Each
// iteration is a batch of RPCs, each checked for its payload and for
// exactly one execution.
//
//	go test -run '^$' -bench LossMem -benchtime 1x ./homa
func BenchmarkLossMem(b *testing.B) {
	for _, size := range []int{100, 100_000} {
		for _, loss := range []float64{0, 0.01, 0.05, 0.10, 0.30} {
			b.Run(fmt.Sprintf("size=%d/loss=%.0f%%", size, loss*100), func(b *testing.B) {
				n := 2000
				if size > 1000 {
					n = 300
				}
				var times []time.Duration
				for b.Loop() {
					cfg := memnet.Config{Seed: 7, MTU: 1500, Loss: loss}
					times = append(times, lossRun(b, cfg, n, 4, []int{size})...)
				}
				slices.Sort(times)
				q := func(f float64) float64 { return float64(times[int(f*float64(len(times)-1))].Microseconds()) }
				b.ReportMetric(q(0.5), "p50-µs")
				b.ReportMetric(q(0.99), "p99-µs")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// BenchmarkThroughputUDP4 keeps 4 goroutines with 32 RPCs of 100 bytes
// in flight each between two endpoints over UDP on loopback (one
// process), and reports RPCs/s: the contention on each endpoint's lock
// shows in -mutexprofile.
func BenchmarkThroughputUDP4(b *testing.B) {
	addr := netip.MustParseAddr("127.0.0.1")
	sc, err := netio.OpenUDP(addr, 23001, nil)
	if err != nil {
		b.Fatal(err)
	}
	cc, err := netio.OpenUDP(addr, 0, nil)
	if err != nil {
		b.Fatal(err)
	}
	p := startPair(b, homa.NewEndpoint(sc, homa.Config{}), homa.NewEndpoint(cc, homa.Config{}))
	const workers, outstanding = 4, 32
	req := make([]byte, 100)
	ctx := context.Background()
	b.ReportAllocs()
	start := time.Now()
	per := max(b.N/workers, outstanding)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			ids := make([]uint64, 0, outstanding)
			for sent := 0; sent < per || len(ids) > 0; {
				for len(ids) < outstanding && sent < per {
					id, err := p.client.Send(p.dst, req, 0)
					if err != nil {
						b.Error(err)
						return
					}
					ids = append(ids, id)
					sent++
				}
				m, err := p.client.Recv(ctx, ids[0])
				if err != nil {
					b.Error(err)
					return
				}
				m.Release()
				ids = ids[1:]
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(per*workers)/time.Since(start).Seconds(), "RPCs/s")
}
