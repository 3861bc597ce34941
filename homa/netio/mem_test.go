package netio_test

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/homa/netio"
)

// memPairs runs f on two Conns of an in-memory network, for IPv4 and
// IPv6; dst is the address of b.
func memPairs(t *testing.T, cfg memnet.Config, f func(t *testing.T, a, b netio.Conn, dst netip.Addr)) {
	for _, fam := range []struct{ name, a, b string }{{"ipv4", "10.0.0.1", "10.0.0.2"}, {"ipv6", "fd00::1", "fd00::2"}} {
		t.Run(fam.name, func(t *testing.T) {
			n := memnet.New(cfg)
			defer n.Close()
			a, err := n.Open(netip.MustParseAddr(fam.a), 0)
			if err != nil {
				t.Fatal(err)
			}
			b, err := n.Open(netip.MustParseAddr(fam.b), 0)
			if err != nil {
				t.Fatal(err)
			}
			f(t, a, b, netip.MustParseAddr(fam.b))
		})
	}
}

// TestMemLand checks landing reads on the in-memory network, both
// families, and reports, which land nothing.
func TestMemLand(t *testing.T) {
	memPairs(t, memnet.Config{MTU: 9000, ReportUnreachable: true}, func(t *testing.T, a, b netio.Conn, dst netip.Addr) {
		netio.TestLanding(t, a, b, dst)
		lost := netio.TestPacket(a.Port(), b.Port()+1, 1000, 0xdead)
		netio.WriteAll(t, a, dst, 0, lost)
		p := []netio.Packet{{Buf: make([]byte, 2048), Land: make([]byte, netio.LandLen), Landed: 3}}
		netio.ReadInto(t, a, p)
		if p[0].Unreachable != netio.UnreachablePort || p[0].Landed != 0 || p[0].N < netio.ReportMinLen || !bytes.Equal(p[0].Bytes(), lost[:p[0].N]) {
			t.Errorf("report: %v, N %d, Landed %d, tag %#x; want netio.UnreachablePort quoting the packet, Landed 0",
				p[0].Unreachable, p[0].N, p[0].Landed, netio.TagOf(p[0].Bytes()))
		}
	})
}

func BenchmarkMemPingPong(b *testing.B) {
	n := memnet.New(memnet.Config{})
	defer n.Close()
	x, _ := n.Open(netip.MustParseAddr("10.0.0.1"), 0)
	y, _ := n.Open(netip.MustParseAddr("10.0.0.2"), 0)
	netio.PingPong(b, x, y, y.LocalAddr(), x.LocalAddr())
}
