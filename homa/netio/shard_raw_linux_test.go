package netio

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
)

func openRawGroup(t *testing.T, laddr netip.Addr, port uint16, n int, opt *Options) []Conn {
	t.Helper()
	return openGroupWith(t, OpenRawGroup, laddr, port, n, opt)
}

// TestRawGroupShards sends from many client ports to a raw group of
// three and checks that every packet reaches the Conn ShardOf names for
// its sender, and nothing else does: the sockets' filters compute
// ShardOf as the UDP group's kernel program does.
func TestRawGroupShards(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			checkGroupShards(t, openRawGroup(t, fam.lo, 0, 3, nil), fam.lo, func() Conn { return openRaw(t, fam.lo, 0, nil) })
		})
	}
}

// TestRawGroupPort checks that a raw group's port is its own, and that
// a group of one is a plain Conn.
func TestRawGroupPort(t *testing.T) {
	group := openRawGroup(t, lo4, 0, 2, nil)
	if c, err := OpenRaw(lo4, group[0].Port(), nil); !errors.Is(err, ErrPortInUse) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("a Conn on a group's port %d: %v, want ErrPortInUse", group[0].Port(), err)
	}
	one := openRawGroup(t, lo4, 0, 1, nil)
	if _, ok := one[0].(*sockConn); !ok {
		t.Fatalf("a group of one is a %T", one[0])
	}
	if _, err := OpenRawGroup(lo4, 0, MaxShards+1, nil); err == nil {
		t.Fatal("a group of MaxShards+1 opened")
	}
}

// TestRawGroupReports sends from a raw group in a namespace to a host
// with no raw protocol 146 socket, whose kernel answers each packet
// with ICMP protocol unreachable; every socket of the group gets the
// report, and only the Conn of the destination's shard, which sent the
// packet, returns it.
func TestRawGroupReports(t *testing.T) {
	const n = 3
	p := newNSPair(t)
	for _, fam := range p.families() {
		t.Run(fam.name, func(t *testing.T) {
			var cs []Conn
			inNS(t, p.a, func() { cs = openRawGroup(t, fam.a, 0, n, nsOpts(true)) })
			for dst := uint16(500); dst < 512; dst++ {
				k := ShardOf(netip.AddrPortFrom(fam.b, dst), n)
				lost := testPacket(cs[k].Port(), dst, 100, uint64(dst))
				writeAll(t, cs[k], fam.b, 0, lost)
				r := readN(t, cs[k], 1)[0]
				if r.unreach != UnreachableProtocol || r.addr != fam.b || !bytes.Equal(r.data, lost) {
					t.Fatalf("dst %d: shard %d read %v from %v, want the report of its packet", dst, k, r.unreach, r.addr)
				}
			}
			for k, c := range cs {
				expectNothing(t, c)
				if s := c.(StatsConn).Stats(); s.Reports+s.ReportsDiscarded != 12 {
					t.Errorf("shard %d: %d reports returned and %d discarded, want 12 in all", k, s.Reports, s.ReportsDiscarded)
				}
			}
		})
	}
}
