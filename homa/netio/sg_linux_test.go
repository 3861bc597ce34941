//go:build linux

package netio

import (
	"errors"
	"net/netip"
	"testing"
)

// sockKind is a way to open a socket Conn.
type sockKind struct {
	name string
	udp  bool
	opt  Options
}

// sockKinds are the socket Conns every Scatter-gather test runs on: raw
// IP, UDP with the offloads the kernel has, and UDP without them.
var sockKinds = []sockKind{
	{"raw", false, Options{}},
	{"udp", true, Options{}},
	{"udp-plain", true, Options{DisableGSO: true, DisableGRO: true}},
}

func (k sockKind) open(t testing.TB, laddr netip.Addr) Conn {
	t.Helper()
	opt := k.opt
	if k.udp {
		return openUDP(t, laddr, 0, &opt)
	}
	return openRaw(t, laddr, 0, &opt)
}

// TestSockPayload checks Scatter-gather writes on raw and UDP Conns, both
// families: header and payload arrive as one packet, byte for byte and
// in order, whatever the sizes (a bare header, a run of equal packets
// that UDP sends as GSO datagrams, the largest packet), read by a copying
// and by a borrowing reader.
func TestSockPayload(t *testing.T) {
	for _, kind := range sockKinds {
		for _, fam := range families {
			for _, borrow := range []bool{false, true} {
				name := kind.name + "/" + fam.name
				if borrow {
					name += "/borrowed"
				}
				t.Run(name, func(t *testing.T) {
					a, b := kind.open(t, fam.lo), kind.open(t, fam.lo)
					whole, pkts := payloadBatch(a.Port(), b.Port(), fam.lo, a.MaxPacket(fam.lo), 0x200)
					if k, err := a.WriteBatch(pkts); k != len(pkts) || err != nil {
						t.Fatalf("WriteBatch = %d, %v", k, err)
					}
					var got []received
					if borrow {
						got = readBorrowedN(t, b, len(whole))
					} else {
						got = readN(t, b, len(whole))
					}
					checkReceived(t, got, whole, fam.lo)
					s := a.(StatsConn).Stats()
					if s.Written != uint64(len(pkts)) || s.SendCalls == 0 || s.SendDatagrams > s.Written {
						t.Errorf("sender stats %+v, want %d written", s, len(pkts))
					}
					if s.GSO && s.SendDatagrams >= s.Written {
						t.Errorf("GSO on, yet %d datagrams carried %d packets: the run of 21 was not coalesced", s.SendDatagrams, s.Written)
					}
				})
			}
		}
	}
}

// readBorrowedN is readN through BorrowReader.TryReadBorrowed, copying
// each packet before the next read.
func readBorrowedN(t testing.TB, c Conn, n int) []received {
	t.Helper()
	br := c.(BorrowReader)
	pkts := make([]Packet, 8)
	var got []received
	for tries := 0; len(got) < n; tries++ {
		if tries > 1e6 {
			t.Fatalf("only %d of %d packets arrived", len(got), n)
		}
		k, err := br.TryReadBorrowed(pkts[:min(len(pkts), n-len(got))])
		if err != nil {
			t.Fatalf("TryReadBorrowed after %d of %d packets: %v", len(got), n, err)
		}
		for _, p := range pkts[:k] {
			if len(p.Buf) != p.N {
				t.Fatalf("borrowed Buf of %d bytes for a packet of %d", len(p.Buf), p.N)
			}
			got = append(got, received{append([]byte(nil), p.Bytes()...), p.Addr, p.Unreachable})
		}
	}
	return got
}

// TestSockPayloadChecks checks that the size limit counts the payload:
// a packet whose header fits but whose whole does not is refused before
// the kernel sees it, after the packets before it went out.
func TestSockPayloadChecks(t *testing.T) {
	for _, kind := range sockKinds {
		for _, fam := range families {
			t.Run(kind.name+"/"+fam.name, func(t *testing.T) {
				a, b := kind.open(t, fam.lo), kind.open(t, fam.lo)
				limit := maxDatagram(fam.lo.Is6(), kind.udp)
				ok := testPacket(a.Port(), b.Port(), limit, 1)
				big := testPacket(a.Port(), b.Port(), limit+1, 2)
				pkts := []Packet{withPayload(ok, 60, fam.lo, 0), withPayload(big, 60, fam.lo, 0)}
				if k, err := a.WriteBatch(pkts); k != 1 || !errors.Is(err, ErrBadPacket) {
					t.Fatalf("WriteBatch of %d then %d bytes = %d, %v; want 1, ErrBadPacket", limit, limit+1, k, err)
				}
				checkReceived(t, readN(t, b, 1), [][]byte{ok}, fam.lo)
			})
		}
	}
}

// TestSockAllocs checks that writing and reading cost no allocation per
// packet, for every kind of socket Conn and both kinds of read, with
// Land on every other Packet read into.
func TestSockAllocs(t *testing.T) {
	for _, kind := range sockKinds {
		for _, borrow := range []bool{false, true} {
			name := kind.name
			if borrow {
				name += "/borrowed"
			}
			t.Run(name, func(t *testing.T) {
				a, b := kind.open(t, lo4), kind.open(t, lo4)
				_, out := payloadBatch(a.Port(), b.Port(), lo4, 9000, 1)
				in := makePackets(16, 1<<16)
				for i := 0; i < len(in); i += 2 {
					in[i].Land = make([]byte, 4096)
				}
				read := tryReader(b, borrow)
				step := func() {
					if k, err := a.WriteBatch(out); k != len(out) || err != nil {
						t.Fatalf("WriteBatch = %d, %v", k, err)
					}
					// Loopback delivers during the send: everything is
					// queued by now.
					for got, tries := 0, 0; got < len(out); tries++ {
						k, err := read(in)
						if err != nil || tries > 1000 {
							t.Fatalf("read %d of %d packets: %v", got, len(out), err)
						}
						got += k
					}
				}
				step() // the receive area is allocated at the first read
				if allocs := testing.AllocsPerRun(50, step); allocs != 0 {
					t.Errorf("%v allocations per batch of %d packets, want 0", allocs, len(out))
				}
			})
		}
	}
}
