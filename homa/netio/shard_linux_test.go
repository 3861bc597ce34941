package netio

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

func openGroup(t *testing.T, laddr netip.Addr, port uint16, n int) []Conn {
	t.Helper()
	cs, err := OpenUDPGroup(laddr, port, n, nil)
	if laddr.Is6() && errors.Is(err, unix.EADDRNOTAVAIL) {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	if err != nil {
		t.Fatalf("OpenUDPGroup(%v, %d, %d): %v", laddr, port, n, err)
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
	const n, senders, each = 3, 8, 3
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			group := openGroup(t, fam.lo, 0, n)
			port := group[0].Port()
			for _, c := range group {
				if c.Port() != port {
					t.Fatalf("ports %d and %d in one group", c.Port(), port)
				}
			}
			want := make([]int, n)
			used := map[int]bool{}
			for range senders {
				s := openUDP(t, fam.lo, 0, nil)
				k := ShardOf(netip.AddrPortFrom(fam.lo, s.Port()), n)
				want[k] += each
				used[k] = true
				for i := range each {
					writeAll(t, s, fam.lo, 0, testPacket(s.Port(), port, homaHeaderLen+10, uint64(i+1)))
				}
			}
			if len(used) < 2 {
				t.Fatalf("%d client ports all hash to one shard", senders)
			}
			for k, c := range group {
				for _, p := range readN(t, c, want[k]) {
					src := binary.BigEndian.Uint16(p.data)
					if got := ShardOf(netip.AddrPortFrom(p.addr, src), n); got != k {
						t.Errorf("shard %d got a packet of port %d, which belongs to shard %d", k, src, got)
					}
				}
			}
			for _, c := range group {
				expectNothing(t, c)
			}
		})
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
