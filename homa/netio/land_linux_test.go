//go:build linux

package netio

import (
	"bytes"
	"net/netip"
	"testing"
)

// landKinds are the socket Conns that land: raw IP, and UDP without GRO.
var landKinds = []sockKind{
	{"raw", false, Options{}},
	{"udp", true, Options{DisableGRO: true}},
}

// TestSockLand checks landing reads on raw and UDP Conns, both families
// (see testLanding): the kernel scatters each datagram over Buf[:LandAt],
// Land and Buf[LandAt:] as the rule says, whatever its size.
func TestSockLand(t *testing.T) {
	eachLandPair(t, func(t *testing.T, a, b Conn, lo netip.Addr) {
		testLanding(t, a, b, lo)
		if s := b.(StatsConn).Stats(); s.RecvDatagrams != s.Read+s.Discarded {
			t.Errorf("%d datagrams received, %d packets read and %d discarded", s.RecvDatagrams, s.Read, s.Discarded)
		}
	})
}

// eachLandPair runs f, as a subtest, on two Conns a and b of each kind
// that lands, on the loopback address lo of each family.
func eachLandPair(t *testing.T, f func(t *testing.T, a, b Conn, lo netip.Addr)) {
	for _, kind := range landKinds {
		for _, fam := range families {
			t.Run(kind.name+"/"+fam.name, func(t *testing.T) {
				f(t, kind.open(t, fam.lo), kind.open(t, fam.lo), fam.lo)
			})
		}
	}
}

// TestUDPLandGRO checks that a UDP Conn with GRO says it does not land,
// and that it leaves Land alone: its reads copy each packet whole into
// Buf.
func TestUDPLandGRO(t *testing.T) {
	if openUDP(t, lo4, 0, &Options{DisableGRO: true}).(Lander).Lands() != true {
		t.Error("a UDP Conn without GRO does not land")
	}
	a, b := openUDP(t, lo4, 0, nil), openUDP(t, lo4, 0, nil)
	if !b.(StatsConn).Stats().GRO {
		if !b.(Lander).Lands() {
			t.Error("a UDP Conn without GRO (the kernel has none) does not land")
		}
		t.Skip("the kernel has no UDP GRO")
	}
	if b.(Lander).Lands() {
		t.Error("a UDP Conn with GRO says it lands")
	}
	sent := testPacket(a.Port(), b.Port(), 1000, 0x6e0)
	writeAll(t, a, lo4, 0, sent)
	land := bytes.Repeat([]byte{0xee}, landLen)
	p := []Packet{{Buf: make([]byte, 2048), Land: land, Landed: 9}}
	readInto(t, b, p)
	if p[0].Landed != 0 || !bytes.Equal(p[0].Bytes(), sent) {
		t.Errorf("N %d, Landed %d; want the %d bytes whole in Buf", p[0].N, p[0].Landed, len(sent))
	}
	if !bytes.Equal(land, bytes.Repeat([]byte{0xee}, landLen)) {
		t.Error("a read with GRO wrote into Land")
	}
}

// TestRawIPOptionsLand reads packets whose IPv4 header carries options
// (see sendWithIPOptions) with Land set: the options push the packet
// along, so the Conn puts it back together in Buf, landing nothing, as
// long as the datagram past the first 20 bytes of the IP header fits in
// Buf; else it discards it.
func TestRawIPOptionsLand(t *testing.T) {
	a := openRaw(t, lo4, 0, nil)
	b := openRaw(t, lo4, 0, nil)
	const spill = 4 // the options
	// Fits exactly.
	p := []Packet{{Buf: make([]byte, 300+spill), Land: make([]byte, 100), Landed: 42}}
	pkt := sendWithIPOptions(t, b.Port())
	if len(pkt) != 300 {
		t.Fatalf("sendWithIPOptions sent %d bytes, not 300", len(pkt))
	}
	readInto(t, b, p)
	if p[0].Landed != 0 || !bytes.Equal(p[0].Bytes(), pkt) || p[0].Addr != lo4 {
		t.Fatalf("packet with IP options: N %d, Landed %d from %v; want the %d bytes whole in Buf", p[0].N, p[0].Landed, p[0].Addr, len(pkt))
	}
	// One byte short: discarded, though the kernel had room for it.
	p[0].Buf = p[0].Buf[:300+spill-1]
	sendWithIPOptions(t, b.Port())
	next := testPacket(a.Port(), b.Port(), 300, 0x0b8)
	writeAll(t, a, lo4, 0, next)
	readInto(t, b, p)
	checkLanded(t, "packet after one with IP options too large for Buf", &p[0], next, lo4)
	if p[0].Landed != 100 {
		t.Fatalf("the packet without options landed %d bytes, want 100", p[0].Landed)
	}
	if d := b.(StatsConn).Stats().Discarded; d != 1 {
		t.Errorf("%d packets discarded, want 1", d)
	}
}

// TestUDPUnreachableLand reads a report into a Packet with Land: the
// quote goes whole into Buf, and Landed is 0, on a Conn that lands and
// on one with GRO, which reads through its receive area.
func TestUDPUnreachableLand(t *testing.T) {
	for _, gro := range []bool{false, true} {
		for _, fam := range families {
			name := fam.name
			if gro {
				name += "/gro"
			}
			t.Run(name, func(t *testing.T) {
				testUnreachableLand(t, fam.lo, &Options{ReportUnreachable: true, DisableGRO: !gro})
			})
		}
	}
}

func testUnreachableLand(t *testing.T, lo netip.Addr, opt *Options) {
	a := openUDP(t, lo, 0, opt)
	if lands := a.(Lander).Lands(); lands == a.(StatsConn).Stats().GRO {
		t.Fatalf("Lands() = %v with GRO %v", lands, !lands)
	}
	lost := testPacket(a.Port(), closedUDPPort(t, lo), 300, 0xdead)
	writeAll(t, a, lo, 0, lost)
	p := []Packet{{Buf: make([]byte, 2048), Land: make([]byte, landLen), Landed: 5}}
	readInto(t, a, p)
	if p[0].Unreachable != UnreachablePort || p[0].Landed != 0 || !bytes.Equal(p[0].Bytes(), lost) {
		t.Errorf("report %v: N %d, Landed %d, tag %#x; want the %d bytes quoted whole in Buf, Landed 0",
			p[0].Unreachable, p[0].N, p[0].Landed, tagOf(p[0].Bytes()), len(lost))
	}
}
