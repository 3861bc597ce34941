//go:build linux

package netio

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// rawFamily is one IP family of an nsPair: A's and B's addresses and an
// address on their link that no one answers for.
type rawFamily struct {
	name         string
	a, b, silent netip.Addr
}

func (p *nsPair) families() []rawFamily {
	return []rawFamily{{"ipv4", p.a4, p.b4, p.silent4}, {"ipv6", p.a6, p.b6, p.silent6}}
}

// nsOpts are the options of raw Conns in namespaces: a fixed MTU, so that
// no route lookup happens from the test's namespace.
func nsOpts(report bool) *Options { return &Options{MTU: 1500, ReportUnreachable: report} }

// waitUntil polls cond (bounded by safetyTimeout) until it holds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(safetyTimeout); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, safetyTimeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRawUnreachableProtocol sends a packet to a host without a raw
// protocol 146 socket: its kernel answers ICMP protocol unreachable (IPv6:
// parameter problem, unrecognized next header). The sending Conn reads it
// as UnreachableProtocol; another reporting Conn on the sender's host,
// which the kernel gives the same ICMP error, discards it (its port is
// not the quoted source port); a Conn without reports sees nothing.
func TestRawUnreachableProtocol(t *testing.T) {
	p := newNSPair(t)
	for _, fam := range p.families() {
		t.Run(fam.name, func(t *testing.T) {
			x := openRawIn(t, p.a, fam.a, 0, nsOpts(true))
			y := openRawIn(t, p.a, fam.a, 0, nsOpts(true))
			z := openRawIn(t, p.a, fam.a, 0, nsOpts(false))
			lost := testPacket(x.Port(), 500, 100, 0xdead)
			writeAll(t, x, fam.b, 0, lost)
			r := readN(t, x, 1)[0]
			if r.unreach != UnreachableProtocol || r.addr != fam.b || !bytes.Equal(r.data, lost) {
				t.Fatalf("read %v from %v quoting %d bytes, want %v from %v quoting the %d-byte packet",
					r.unreach, r.addr, len(r.data), UnreachableProtocol, fam.b, len(lost))
			}
			waitUntil(t, "the other Conn discards the report", func() bool {
				expectNothing(t, y)
				return y.(StatsConn).Stats().ReportsDiscarded == 1
			})
			expectNothing(t, z)

			// Traffic flows on.
			writeAll(t, x, fam.a, 0, testPacket(x.Port(), y.Port(), 100, 7))
			if got := readN(t, y, 1)[0]; tagOf(got.data) != 7 || got.unreach != NotUnreachable {
				t.Fatalf("y read tag %d (%v), want 7", tagOf(got.data), got.unreach)
			}
			writeAll(t, y, fam.a, 0, testPacket(y.Port(), x.Port(), 100, 8))
			if got := readN(t, x, 1)[0]; tagOf(got.data) != 8 || got.unreach != NotUnreachable {
				t.Fatalf("x read tag %d (%v), want 8", tagOf(got.data), got.unreach)
			}
			for _, c := range []struct {
				name string
				c    Conn
				want ConnStats
			}{
				{"x", x, ConnStats{Read: 1, Written: 2, Reports: 1}},
				{"y", y, ConnStats{Read: 1, Written: 1, ReportsDiscarded: 1}},
				{"z", z, ConnStats{}},
			} {
				if s := packetCounts(c.c.(StatsConn).Stats()); s != c.want {
					t.Errorf("%s stats %+v, want %+v", c.name, s, c.want)
				}
			}
		})
	}
}

// TestRawUnreachableOtherPort sends a packet to a host where a raw
// protocol 146 socket is open, but for another Homa port. The host's
// kernel hands the packet to that socket, whose filter drops it; it sends
// no ICMP error, so the sender gets no report: the engine cannot tell
// this case from a lost packet and only its timeout ends the RPC. A
// packet sent after it, to the open port, is answered; the answer is
// the first thing the sender reads, so no report was on its way.
func TestRawUnreachableOtherPort(t *testing.T) {
	p := newNSPair(t)
	for _, fam := range p.families() {
		t.Run(fam.name, func(t *testing.T) {
			srv := openRawIn(t, p.b, fam.b, 0, nsOpts(false))
			x := openRawIn(t, p.a, fam.a, 0, nsOpts(true))
			writeAll(t, x, fam.b, 0, testPacket(x.Port(), 500, 100, 1))
			writeAll(t, x, fam.b, 0, testPacket(x.Port(), srv.Port(), 100, 2))
			if got := readN(t, srv, 1)[0]; tagOf(got.data) != 2 {
				t.Fatalf("server read tag %d, want 2", tagOf(got.data))
			}
			writeAll(t, srv, fam.a, 0, testPacket(srv.Port(), x.Port(), 100, 3))
			if got := readN(t, x, 1)[0]; tagOf(got.data) != 3 || got.unreach != NotUnreachable {
				t.Fatalf("x read tag %d (%v), want the answer, tag 3", tagOf(got.data), got.unreach)
			}
			expectNothing(t, x)
			if s := x.(StatsConn).Stats(); s.Reports != 0 || s.ReportsDiscarded != 0 {
				t.Errorf("x stats %+v, want no reports", s)
			}
		})
	}
}

// TestRawUnreachableHost has a Conn send packets to an address on its
// link that no one answers for: they wait for address resolution, holding
// the socket's (small) send buffer, so the socket is not writable. Then it
// sends a packet to a host without Homa, whose ICMP error arrives while
// no datagram is queued and the socket is not writable: epoll reports
// only EPOLLERR (Go's netpoller would refuse to park a reader on such a
// socket until its next event; the Conn parks on an epoll instance of
// its own). The parked reader must wake for it, neither failing nor
// spinning, and read the protocol unreachable report, then, when address
// resolution fails, one host unreachable report per waiting packet from
// the sending host itself.
func TestRawUnreachableHost(t *testing.T) {
	p := newNSPair(t)
	for _, fam := range p.families() {
		t.Run(fam.name, func(t *testing.T) {
			opt := nsOpts(true)
			opt.WriteBuffer = 1 // the kernel's minimum
			x := openRawIn(t, p.a, fam.a, 0, opt)
			sc := x.(*sockConn)
			var fill [][]byte
			for len(fill) < 32 && writable(t, sc) {
				b := testPacket(x.Port(), 600, 1000, uint64(0x100+len(fill)))
				writeAll(t, x, fam.silent, 0, b)
				fill = append(fill, b)
			}
			if writable(t, sc) {
				t.Fatalf("still writable after %d packets waiting for address resolution", len(fill))
			}
			// The probe goes out once the reader is parked, so that the
			// netpoller, not a read, is the first to see the ICMP error.
			probe := testPacket(x.Port(), 500, 100, 0x200)
			sent := make(chan error, 1)
			steps := sc.rd.errq.steps.Load()
			go func() {
				readerInside(x)()
				time.Sleep(5 * time.Millisecond) // let it park
				_, err := x.WriteBatch([]Packet{{Buf: probe, N: len(probe), Addr: fam.b}})
				sent <- err
			}()
			got := readN(t, x, 1+len(fill))
			if err := <-sent; err != nil {
				t.Fatal(err)
			}

			quote := ICMPv4Quote
			if fam.a.Is6() {
				quote = ICMPv6Quote
			}
			var host int
			for _, r := range got {
				switch {
				case r.unreach == UnreachableProtocol && r.addr == fam.b && bytes.Equal(r.data, probe):
				case r.unreach == UnreachableHost && r.addr == fam.silent && host < len(fill):
					want := fill[tagOf(r.data)-0x100]
					if len(r.data) != min(len(want), quote) || !bytes.Equal(r.data, want[:len(r.data)]) {
						t.Errorf("host unreachable report quotes %d bytes (tag %#x), want the first %d of the packet", len(r.data), tagOf(r.data), min(len(want), quote))
					}
					host++
				default:
					t.Errorf("unexpected %v from %v, tag %#x", r.unreach, r.addr, tagOf(r.data))
				}
			}
			if host != len(fill) {
				t.Errorf("%d host unreachable reports, want %d", host, len(fill))
			}
			// A spinning reader runs a receive step per turn: thousands
			// in the milliseconds of address resolution.
			if n := sc.rd.errq.steps.Load() - steps; n > maxSteps(len(got)) {
				t.Errorf("%d receive steps for %d reports: the reader spun", n, len(got))
			} else {
				t.Logf("%d receive steps for %d reports", n, len(got))
			}
			expectNothing(t, x)
		})
	}
}

// maxSteps bounds the receive steps a reader that parks between them
// runs to read n packets or reports: a few per wake-up, even if each one
// comes alone.
func maxSteps(n int) uint64 { return uint64(4*n + 8) }

// writable reports whether c's socket is writable (poll says POLLOUT).
func writable(t *testing.T, c *sockConn) bool {
	t.Helper()
	var ev int16
	err := c.rc.Control(func(fd uintptr) {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		if _, err := unix.Poll(pfd, 0); err == nil {
			ev = pfd[0].Revents
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return ev&unix.POLLOUT != 0
}
