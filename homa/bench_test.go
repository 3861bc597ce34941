package homa_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/homa-go/homa/homa"
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
	if err != nil {
		b.Skip(err)
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
	nw := netio.NewMemNetwork(netio.MemConfig{})
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
	nw := netio.NewMemNetwork(netio.MemConfig{MTU: 1500})
	benchRPCSize(b, nw.Open, "10.0.0.1", 200_000)
}
