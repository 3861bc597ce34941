//go:build linux

package netio

import (
	"bytes"
	"net/netip"
	"testing"
)

// TestSharedRawUnreachable: a member of a share that sends to a host
// without a protocol 146 socket reads the report, and its fellow member
// does not; the report of a packet a Conn with a socket of its own sent
// reaches the shared socket too (the kernel gives ICMP errors to every
// protocol 146 socket), which discards and counts it.
func TestSharedRawUnreachable(t *testing.T) {
	p := newNSPair(t)
	ownSockets(t, 0)
	for _, fam := range p.families() {
		t.Run(fam.name, func(t *testing.T) {
			x := openRawIn(t, p.a, fam.a, 0, nsOpts(true))
			y := openRawIn(t, p.a, fam.a, 0, nsOpts(true))
			z := openRawIn(t, p.a, fam.a, 22000, nsOpts(true))
			if !x.(StatsConn).Stats().Shared || !y.(StatsConn).Stats().Shared || x.(*sharedConn).share != y.(*sharedConn).share {
				t.Fatal("x and y do not share a socket")
			}
			lost := testPacket(x.Port(), 500, 100, 0xdead)
			writeAll(t, x, fam.b, 0, lost)
			r := readN(t, x, 1)[0]
			if r.unreach != UnreachableProtocol || r.addr != fam.b || !bytes.Equal(r.data, lost) {
				t.Fatalf("read %v from %v quoting %d bytes, want %v from %v quoting the packet", r.unreach, r.addr, len(r.data), UnreachableProtocol, fam.b)
			}
			expectNothingShared(t, y)
			before := RawShareStats().ReportsDiscarded
			writeAll(t, z, fam.b, 0, testPacket(z.Port(), 500, 100, 0xbeef))
			if r := readN(t, z, 1)[0]; r.unreach != UnreachableProtocol {
				t.Fatalf("z read %v, want its report", r.unreach)
			}
			waitUntil(t, "the shared socket discards z's report", func() bool {
				expectNothingShared(t, x) // a read pumps the shared socket
				return RawShareStats().ReportsDiscarded == before+1
			})
			expectNothingShared(t, y)
			if s := x.(StatsConn).Stats(); s.Reports != 1 || s.Written != 1 {
				t.Errorf("x stats %+v, want 1 report, 1 written", s)
			}
		})
	}
}

// TestShareNetns: members with the same local address in two network
// namespaces do not share a socket.
func TestShareNetns(t *testing.T) {
	p := newNSPair(t)
	ownSockets(t, 0)
	any4 := netip.IPv4Unspecified()
	here := openRaw(t, any4, 0, nsOpts(false))
	there := openRawIn(t, p.a, any4, 0, nsOpts(false))
	h, ok1 := here.(*sharedConn)
	th, ok2 := there.(*sharedConn)
	if !ok1 || !ok2 {
		t.Fatalf("the Conns do not share sockets: %T, %T", here, there)
	}
	if h.share == th.share {
		t.Fatal("Conns of two network namespaces share one socket")
	}
}
