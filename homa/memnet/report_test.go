package memnet

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/homa/netio"
)

// readAll reads everything c has ready, reports included.
func readAll(t testing.TB, c netio.Conn) []received {
	t.Helper()
	pkts := makePackets(16, 2048)
	var got []received
	for {
		n, err := c.(netio.Poller).TryReadBatch(pkts)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return got
		}
		for _, p := range pkts[:n] {
			got = append(got, received{bytes.Clone(p.Bytes()), p.Addr, p.Unreachable})
		}
	}
}

// TestMemUnreachable checks the reports of a network with
// ReportUnreachable: a packet to a port where no Conn is open comes back
// to its writer as a port unreachable report quoting it (cut to what an
// ICMP message holds), a packet to an open port does not; a report for a
// packet whose source port is not the writer's is discarded.
func TestMemUnreachable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(Config{ReportUnreachable: true, MTU: 9000})
		defer n.Close()
		a := memOpen(t, n, hostA, 0)
		b := memOpen(t, n, hostB, 100)
		a6 := memOpen(t, n, hostA6, 0)

		lost := testPacket(a.Port(), 999, 200, 1)
		big := testPacket(a.Port(), 999, 2000, 2)
		forged := testPacket(a.Port()+1, 999, 200, 3)
		writeAll(t, a, hostB, 0, lost, testPacket(a.Port(), b.Port(), 200, 4), big, forged)
		big6 := testPacket(a6.Port(), 999, 2000, 5)
		writeAll(t, a6, netip.MustParseAddr("fd00::2"), 0, big6)

		if got := readAll(t, b); len(got) != 1 || tagOf(got[0].data) != 4 || got[0].unreach != netio.NotUnreachable {
			t.Fatalf("b read %+v, want the one packet for it", got)
		}
		got := readAll(t, a)
		want := []received{
			{lost, hostB, netio.UnreachablePort},
			{big[:netio.ICMPv4Quote], hostB, netio.UnreachablePort},
		}
		if !slices.EqualFunc(got, want, sameReceived) {
			t.Errorf("a read %v, want %v", summary(got), summary(want))
		}
		got6 := readAll(t, a6)
		if !slices.EqualFunc(got6, []received{{big6[:netio.ICMPv6Quote], netip.MustParseAddr("fd00::2"), netio.UnreachablePort}}, sameReceived) {
			t.Errorf("a6 read %v, want the report quoting %d bytes", summary(got6), netio.ICMPv6Quote)
		}
		if s := a.(netio.StatsConn).Stats(); s.Reports != 2 || s.ReportsDiscarded != 1 || s.Read != 0 || s.Written != 4 {
			t.Errorf("a stats %+v, want 2 reports, 1 discarded, 4 written", s)
		}
		if s := n.Stats(); s.Reported != 4 || s.DroppedNoListener != 4 || s.ReportsDropped != 0 || s.Delivered != 1 {
			t.Errorf("network stats: %d reported, %d no listener, %d reports dropped, %d delivered; want 4, 4, 0, 1",
				s.Reported, s.DroppedNoListener, s.ReportsDropped, s.Delivered)
		}
	})
}

// TestMemUnreachableOff checks that without ReportUnreachable nothing
// comes back.
func TestMemUnreachableOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(Config{})
		defer n.Close()
		a := memOpen(t, n, hostA, 0)
		writeAll(t, a, hostB, 0, testPacket(a.Port(), 999, 200, 1))
		expectNothing(t, a)
		if s := n.Stats(); s.Reported != 0 || s.DroppedNoListener != 1 {
			t.Errorf("network stats: %d reported, %d no listener; want 0, 1", s.Reported, s.DroppedNoListener)
		}
	})
}

// TestMemUnreachableWakes checks that a reader parked in WaitReadable or
// ReadBatch wakes for a report, which arrives after the packet's one-way
// delay, and that a report for a writer that has closed is dropped.
func TestMemUnreachableWakes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(Config{ReportUnreachable: true, Delay: time.Millisecond})
		defer n.Close()
		a := memOpen(t, n, hostA, 0)
		woke := make(chan time.Time, 1)
		go func() {
			if err := a.(netio.Poller).WaitReadable(); err != nil {
				t.Error(err)
			}
			woke <- time.Now()
		}()
		synctest.Wait()
		start := time.Now()
		writeAll(t, a, hostB, 0, testPacket(a.Port(), 999, 200, 1))
		if at := <-woke; at.Sub(start) != time.Millisecond {
			t.Errorf("WaitReadable woke after %v, want the 1 ms delay", at.Sub(start))
		}
		if got := readN(t, a, 1)[0]; got.unreach != netio.UnreachablePort || tagOf(got.data) != 1 {
			t.Errorf("read %v tag %d, want the report", got.unreach, tagOf(got.data))
		}

		// The writer closes while its packet is on the way.
		c := memOpen(t, n, hostA, 0)
		writeAll(t, c, hostB, 0, testPacket(c.Port(), 999, 200, 2))
		c.Close()
		time.Sleep(2 * time.Millisecond)
		if s := n.Stats(); s.Reported != 1 || s.ReportsDropped != 1 {
			t.Errorf("%d reported, %d dropped; want 1 and the one for the closed writer", s.Reported, s.ReportsDropped)
		}
	})
}

// TestMemManyReports has a Conn with nothing but reports to read, more
// than its queue holds: it reads what fitted, then ReadBatch parks until
// Close.
func TestMemManyReports(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const queue, count = 64, 200
		n := New(Config{ReportUnreachable: true, QueueLen: queue})
		defer n.Close()
		a := memOpen(t, n, hostA, 0)
		for i := range count {
			writeAll(t, a, hostB, 0, testPacket(a.Port(), 999, 100, uint64(i)))
		}
		got := readN(t, a, queue)
		for i, r := range got {
			if r.unreach != netio.UnreachablePort || tagOf(r.data) != uint64(i) {
				t.Fatalf("report %d: %v tag %d", i, r.unreach, tagOf(r.data))
			}
		}
		if s := n.Stats(); s.Reported != queue || s.ReportsDropped != count-queue {
			t.Errorf("%d reported, %d dropped; want %d, %d", s.Reported, s.ReportsDropped, queue, count-queue)
		}
		errc := make(chan error, 1)
		go func() {
			_, err := a.ReadBatch(makePackets(4, 2048))
			errc <- err
		}()
		synctest.Wait()
		select {
		case err := <-errc:
			t.Fatalf("ReadBatch returned with nothing queued: %v", err)
		default:
		}
		a.Close()
		if err := <-errc; !errors.Is(err, net.ErrClosed) {
			t.Errorf("ReadBatch after Close = %v, want net.ErrClosed", err)
		}
	})
}

// TestMemUnreachableDeterministic runs a lossy, duplicating, jittery
// network where some packets go to closed ports twice with one seed and
// once with another, and compares what each Conn read, reports included.
func TestMemUnreachableDeterministic(t *testing.T) {
	run := func(seed uint64) ([]received, []received, Stats) {
		var ra, rb []received
		var stats Stats
		synctest.Test(t, func(t *testing.T) {
			n := New(Config{Seed: seed, ReportUnreachable: true, Loss: 0.2, Duplicate: 0.2,
				Reorder: 0.2, Delay: time.Millisecond, Jitter: time.Millisecond})
			defer n.Close()
			a := memOpen(t, n, hostA, 0)
			b := memOpen(t, n, hostB, 100)
			for i := range 200 {
				dst := uint16(100)
				if i%3 == 0 {
					dst = 999
				}
				writeAll(t, a, hostB, 0, testPacket(a.Port(), dst, 100, uint64(i)))
				time.Sleep(100 * time.Microsecond)
			}
			time.Sleep(10 * time.Millisecond)
			ra, rb, stats = readAll(t, a), readAll(t, b), n.Stats()
		})
		return ra, rb, stats
	}
	a1, b1, s1 := run(7)
	a2, b2, s2 := run(7)
	a3, _, _ := run(8)
	if !slices.EqualFunc(a1, a2, sameReceived) || !slices.EqualFunc(b1, b2, sameReceived) || s1 != s2 {
		t.Errorf("two runs with one seed differ: %d/%d reports, %d/%d packets", len(a1), len(a2), len(b1), len(b2))
	}
	if slices.EqualFunc(a1, a3, sameReceived) {
		t.Errorf("two seeds gave the same %d reports", len(a1))
	}
	if s1.Reported == 0 || s1.Reported != s1.DroppedNoListener || uint64(len(a1)) != s1.Reported {
		t.Errorf("%d reported, %d without listener, %d read; want them equal and nonzero", s1.Reported, s1.DroppedNoListener, len(a1))
	}
	for _, r := range a1 {
		if r.unreach != netio.UnreachablePort || tagOf(r.data)%3 != 0 {
			t.Fatalf("report %v for tag %d, which went to an open port", r.unreach, tagOf(r.data))
		}
	}
}

func sameReceived(x, y received) bool {
	return x.unreach == y.unreach && x.addr == y.addr && bytes.Equal(x.data, y.data)
}

// summary describes what was read, for failure messages.
func summary(rs []received) []string {
	var s []string
	for _, r := range rs {
		s = append(s, r.unreach.String()+" from "+r.addr.String()+" tag "+strconv.FormatUint(tagOf(r.data), 10)+" len "+strconv.Itoa(len(r.data)))
	}
	return s
}
