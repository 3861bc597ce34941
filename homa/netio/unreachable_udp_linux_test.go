//go:build linux

package netio

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var reportOpts = &Options{ReportUnreachable: true}

// closedUDPPort returns a UDP port on laddr where nothing listens: one a
// Conn held a moment ago, from the range openRandomPort draws from, which
// no other process on the host takes in between.
func closedUDPPort(t *testing.T, laddr netip.Addr) uint16 {
	t.Helper()
	c := openRandomPort(t, func(p uint16) (Conn, error) { return OpenUDP(laddr, p, nil) })
	port := c.Port()
	c.Close()
	return port
}

// echo sends a packet tagged tag from a to b, has b send one tagged tag+1
// back, and checks that both arrive as ordinary packets.
func echo(t *testing.T, a, b Conn, addr netip.Addr, tag uint64) {
	t.Helper()
	writeAll(t, a, addr, 0, testPacket(a.Port(), b.Port(), 100, tag))
	got := readN(t, b, 1)[0]
	if tagOf(got.data) != tag || got.unreach != NotUnreachable {
		t.Fatalf("b read tag %#x (%v), want %#x", tagOf(got.data), got.unreach, tag)
	}
	writeAll(t, b, addr, 0, testPacket(b.Port(), a.Port(), 100, tag+1))
	back := readN(t, a, 1)[0]
	if tagOf(back.data) != tag+1 || back.unreach != NotUnreachable {
		t.Fatalf("a read tag %#x (%v), want %#x", tagOf(back.data), back.unreach, tag+1)
	}
}

// TestUDPUnreachable sends a packet to a closed UDP port on loopback and
// reads the report; ordinary traffic flows before, in between (a send
// right after the ICMP error, which the kernel fails with it, must still
// go out) and after.
func TestUDPUnreachable(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			a := openUDP(t, fam.lo, 0, reportOpts)
			b := openUDP(t, fam.lo, 0, nil)
			dead := closedUDPPort(t, fam.lo)
			echo(t, a, b, fam.lo, 0x100)

			lost := testPacket(a.Port(), dead, 100, 0xdead)
			writeAll(t, a, fam.lo, 3, lost)
			// On loopback the ICMP error is back before the send returns:
			// this send meets it.
			writeAll(t, a, fam.lo, 0, testPacket(a.Port(), b.Port(), 100, 0x200))
			if got := readN(t, b, 1)[0]; tagOf(got.data) != 0x200 {
				t.Fatalf("b read tag %#x, want 0x200", tagOf(got.data))
			}
			writeAll(t, b, fam.lo, 0, testPacket(b.Port(), a.Port(), 100, 0x201))
			var report, reply *received
			for _, r := range readN(t, a, 2) {
				switch {
				case r.unreach != NotUnreachable:
					report = &r
				case tagOf(r.data) == 0x201:
					reply = &r
				}
			}
			if report == nil || reply == nil {
				t.Fatalf("a did not read one report and the reply (report %v, reply %v)", report != nil, reply != nil)
			}
			if report.unreach != UnreachablePort || report.addr != fam.lo {
				t.Errorf("report %v from %v, want %v from %v", report.unreach, report.addr, UnreachablePort, fam.lo)
			}
			if !bytes.Equal(report.data, lost) {
				t.Errorf("report quotes %d bytes (%x...), want the %d-byte packet", len(report.data), report.data[:min(len(report.data), homaHeaderLen)], len(lost))
			}

			echo(t, a, b, fam.lo, 0x300)
			expectNothing(t, a)
			s := a.(StatsConn).Stats()
			if s.Reports != 1 || s.ReportsDiscarded != 0 || s.Read != 3 || s.Written != 4 {
				t.Errorf("a stats %+v, want 1 report, 3 read, 4 written", s)
			}
		})
	}
}

// TestUDPUnreachableOff checks that a Conn without ReportUnreachable
// sees nothing of the same ICMP error: no report, no error.
func TestUDPUnreachableOff(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			a := openUDP(t, fam.lo, 0, nil)
			b := openUDP(t, fam.lo, 0, nil)
			dead := closedUDPPort(t, fam.lo)
			writeAll(t, a, fam.lo, 0, testPacket(a.Port(), dead, 100, 0xdead))
			echo(t, a, b, fam.lo, 0x100)
			expectNothing(t, a)
			if s := a.(StatsConn).Stats(); s.Reports != 0 || s.ReportsDiscarded != 0 || s.Read != 1 || s.Written != 2 {
				t.Errorf("a stats %+v, want no reports, 1 read, 2 written", s)
			}
		})
	}
}

// TestUDPManyReports has a Conn with no traffic but reports: it reads
// them all, then a ReadBatch parks (it does not run receive steps in a
// loop) and so does a WaitReadable, until Close. GSO is off, so that
// each packet is a datagram of its own and draws its own report.
func TestUDPManyReports(t *testing.T) {
	const count = 300
	a := openUDP(t, lo4, 0, &Options{ReportUnreachable: true, DisableGSO: true})
	dead := closedUDPPort(t, lo4)
	for i := 0; i < count; i += 50 {
		bufs := make([][]byte, 50)
		for j := range bufs {
			bufs[j] = testPacket(a.Port(), dead, 64, uint64(1000+i+j))
		}
		writeAll(t, a, lo4, 0, bufs...)
	}
	var tags []uint64
	for _, r := range readN(t, a, count) {
		if r.unreach != UnreachablePort || r.addr != lo4 || dstPort(r.data) != dead {
			t.Fatalf("read %v from %v for port %d, want port unreachable reports", r.unreach, r.addr, dstPort(r.data))
		}
		tags = append(tags, tagOf(r.data))
	}
	slices.Sort(tags)
	for i, tag := range tags {
		if tag != uint64(1000+i) {
			t.Fatalf("report tags %v..., want 1000..%d once each", tags[:min(len(tags), 10)], 1000+count-1)
		}
	}
	if s := a.(StatsConn).Stats(); s.Reports != count || s.Read != 0 {
		t.Errorf("stats %+v, want %d reports and nothing read", s, count)
	}
	expectNothing(t, a)
	checkParks(t, a)
}

// checkParks checks that with nothing to read, WaitReadable and ReadBatch
// park: they do not return, and run at most a couple of receive steps
// (the one before parking, a spurious wake-up) while parked. It closes c.
func checkParks(t *testing.T, c Conn) {
	t.Helper()
	sc := c.(*sockConn)
	woke := make(chan error, 1)
	go func() { woke <- sc.WaitReadable() }()
	time.Sleep(20 * time.Millisecond) // let it park
	select {
	case err := <-woke:
		t.Fatalf("WaitReadable returned with nothing queued: %v", err)
	default:
	}
	errc := make(chan error, 1)
	go func() {
		_, err := c.ReadBatch(makePackets(4, 2048))
		errc <- err
	}()
	readerInside(c)()
	before := sc.rd.errq.steps.Load()
	time.Sleep(50 * time.Millisecond)
	if steps := sc.rd.errq.steps.Load() - before; steps > 4 {
		t.Errorf("parked readers ran %d receive steps in 50 ms: they spin", steps)
	}
	select {
	case err := <-errc:
		t.Fatalf("ReadBatch returned with nothing queued: %v", err)
	default:
	}
	c.Close()
	for _, ch := range []chan error{woke, errc} {
		select {
		case err := <-ch:
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("after Close: %v, want net.ErrClosed", err)
			}
		case <-time.After(safetyTimeout):
			t.Fatal("Close did not end a parked reader")
		}
	}
}

// TestUDPReportWithoutSignal puts a report in the error queue and takes
// away the socket's pending error, as a concurrent send does, with no
// hint left for the reader. A reader must still find it: ReadBatch looks
// at the error queue before it parks, WaitReadable sees POLLERR.
func TestUDPReportWithoutSignal(t *testing.T) {
	a := openUDP(t, lo4, 0, reportOpts)
	sc := a.(*sockConn)
	dead := closedUDPPort(t, lo4)
	loseSignal := func(tag uint64) {
		t.Helper()
		writeAll(t, a, lo4, 0, testPacket(a.Port(), dead, 64, tag))
		var soerr int
		sc.rc.Control(func(fd uintptr) {
			// Wait (bounded) for the ICMP error, then consume it.
			for range 1000 {
				if soerr, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR); soerr != 0 {
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
		if unix.Errno(soerr) != unix.ECONNREFUSED {
			t.Fatalf("pending error %v, want ECONNREFUSED", unix.Errno(soerr))
		}
		sc.rd.errq.hint.Store(false)
	}

	loseSignal(1)
	if got := readN(t, a, 1)[0]; got.unreach != UnreachablePort || tagOf(got.data) != 1 {
		t.Fatalf("ReadBatch read %v tag %d, want the report of tag 1", got.unreach, tagOf(got.data))
	}

	loseSignal(2)
	if err := sc.WaitReadable(); err != nil {
		t.Fatal(err)
	}
	pkts := makePackets(4, 2048)
	n, err := sc.TryReadBatch(pkts)
	if err != nil || n != 1 || pkts[0].Unreachable != UnreachablePort || tagOf(pkts[0].Bytes()) != 2 {
		t.Fatalf("TryReadBatch after WaitReadable = %d, %v; want the report of tag 2", n, err)
	}
}
