package netio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func openGroup(t *testing.T, laddr netip.Addr, port uint16, n int) []Conn {
	t.Helper()
	return openGroupWith(t, OpenUDPGroup, laddr, port, n, nil)
}

// openGroupWith opens a group with open (OpenUDPGroup or OpenRawGroup),
// closed when t ends, or skips t when the host or the process cannot.
func openGroupWith(t *testing.T, open func(netip.Addr, uint16, int, *Options) ([]Conn, error), laddr netip.Addr, port uint16, n int, opt *Options) []Conn {
	t.Helper()
	cs, err := open(laddr, port, n, opt)
	if laddr.Is6() && errors.Is(err, unix.EADDRNOTAVAIL) {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	if errors.Is(err, ErrPermission) {
		t.Skipf("skipping: raw sockets need CAP_NET_RAW: %v", err)
	}
	if err != nil {
		t.Fatalf("opening a group of %d on %v, port %d: %v", n, laddr, port, err)
	}
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	return cs
}

// TestUDPGroupShards sends from many client ports to a group of three
// and checks that every packet reaches the Conn ShardOf names for its
// sender, and nothing else does.
func TestUDPGroupShards(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			checkGroupShards(t, openGroup(t, fam.lo, 0, 3), fam.lo, func() Conn { return openUDP(t, fam.lo, 0, nil) })
		})
	}
}

// checkGroupShards sends from 8 Conns that sender opens to group, 3
// packets each (and one too short for a Homa header, and one for the
// next port, which no Conn of the group takes), and checks that each
// packet reaches the Conn ShardOf names for its sender, and nothing else
// does.
func checkGroupShards(t *testing.T, group []Conn, lo netip.Addr, sender func() Conn) {
	const senders, each = 8, 3
	n := len(group)
	port := group[0].Port()
	for _, c := range group {
		if c.Port() != port {
			t.Fatalf("ports %d and %d in one group", c.Port(), port)
		}
	}
	want := make([]int, n)
	used := map[int]bool{}
	for range senders {
		s := sender()
		k := ShardOf(netip.AddrPortFrom(lo, s.Port()), n)
		want[k] += each
		used[k] = true
		for i := range each {
			writeAll(t, s, lo, 0, testPacket(s.Port(), port, homaHeaderLen+10, uint64(i+1)))
		}
		writeAll(t, s, lo, 0, testPacket(s.Port(), port, 8, 99), testPacket(s.Port(), port+1, homaHeaderLen, 98))
	}
	if len(used) < 2 {
		t.Fatalf("%d client ports all hash to one shard", senders)
	}
	for k, c := range group {
		for _, p := range readN(t, c, want[k]) {
			src := binary.BigEndian.Uint16(p.data)
			if got := ShardOf(netip.AddrPortFrom(p.addr, src), n); got != k || len(p.data) != homaHeaderLen+10 {
				t.Errorf("shard %d got %d bytes from port %d, which belongs to shard %d", k, len(p.data), src, got)
			}
		}
	}
	for _, c := range group {
		expectNothing(t, c)
	}
}

// TestUDPGroupPortInUse checks that a group's port is its own: neither
// another group nor a plain Conn can bind it.
func TestUDPGroupPortInUse(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	group := openGroup(t, lo, 0, 2)
	if cs, err := OpenUDPGroup(lo, group[0].Port(), 2, nil); !errors.Is(err, ErrPortInUse) {
		for _, c := range cs {
			c.Close()
		}
		t.Fatalf("second group on port %d: %v, want ErrPortInUse", group[0].Port(), err)
	}
	if c, err := OpenUDP(lo, group[0].Port(), nil); !errors.Is(err, ErrPortInUse) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("plain Conn on a group's port %d: %v, want ErrPortInUse", group[0].Port(), err)
	}
	if _, err := OpenUDPGroup(lo, 0, 0, nil); err == nil {
		t.Fatal("a group of 0 opened")
	}
}

// TestShardOfMapped checks that an IPv4-mapped peer is its IPv4 self.
func TestShardOfMapped(t *testing.T) {
	for port := uint16(32768); port < 32800; port++ {
		a := ShardOf(netip.MustParseAddrPort("10.1.2.3:0"), 1)
		v4 := ShardOf(netip.AddrPortFrom(netip.MustParseAddr("10.1.2.3"), port), 5)
		v6 := ShardOf(netip.AddrPortFrom(netip.MustParseAddr("::ffff:10.1.2.3"), port), 5)
		if a != 0 || v4 != v6 || v4 < 0 || v4 >= 5 {
			t.Fatalf("port %d: ShardOf = %d (IPv4) and %d (mapped), n=1 gives %d", port, v4, v6, a)
		}
	}
}

// TestUDPGroupReports checks that the ICMP report about a packet to a
// closed port comes back to the Conn of the destination's shard, the
// one that sent it, whichever socket the kernel gave it to.
func TestUDPGroupReports(t *testing.T) {
	const n = 3
	lo := netip.MustParseAddr("127.0.0.1")
	cs, err := OpenUDPGroup(lo, 0, n, &Options{ReportUnreachable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	for dst := uint16(30101); dst < 30113; dst++ {
		k := ShardOf(netip.AddrPortFrom(lo, dst), n)
		writeAll(t, cs[k], lo, 0, testPacket(cs[k].Port(), dst, homaHeaderLen+10, uint64(dst)))
		got := readGroup(t, cs, k)
		if got.unreach != UnreachablePort || len(got.data) < 4 || binary.BigEndian.Uint16(got.data[2:]) != dst || got.addr != lo {
			t.Fatalf("dst %d: shard %d read %v from %v (%d bytes), want its port unreachable report", dst, k, got.unreach, got.addr, len(got.data))
		}
		for _, c := range cs {
			expectNothing(t, c)
		}
	}
}

// readGroup reads every Conn of a group without waiting until Conn k
// returns a packet, and fails if another returns one first: a report
// is forwarded when the Conn whose socket got it reads.
func readGroup(t *testing.T, cs []Conn, k int) received {
	t.Helper()
	pkts := makePackets(4, 2048)
	deadline := time.Now().Add(safetyTimeout)
	for time.Now().Before(deadline) {
		for i, c := range cs {
			n, err := c.(Poller).TryReadBatch(pkts)
			if err != nil {
				t.Fatal(err)
			}
			if n > 0 && i != k {
				t.Fatalf("shard %d read %v meant for shard %d", i, pkts[0].Unreachable, k)
			}
			if n > 0 {
				return received{bytes.Clone(pkts[0].Bytes()), pkts[0].Addr, pkts[0].Unreachable}
			}
		}
		runtime.Gosched()
	}
	t.Fatal("no report (safety timeout)")
	return received{}
}
