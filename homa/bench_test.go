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
	req := make([]byte, 100)
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
