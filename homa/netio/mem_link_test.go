package netio

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

var (
	hostC  = netip.MustParseAddr("10.0.0.3")
	hostB6 = netip.MustParseAddr("fd00::2")
)

// fullGap is the time a 1,500-byte IP packet (the largest Homa packet of
// the default MTU) takes on a 100 Mbit/s link.
const fullGap = 120 * time.Microsecond

// arrival is one packet read by record: its tag and when it was read.
type arrival struct {
	tag uint64
	at  time.Duration // since record was called
}

// record reads c in a goroutine until stop, noting when each packet was
// read. In a synctest bubble the reader wakes at the instant a packet is
// delivered, so the times are exact. stop waits until the reader is
// parked, closes c and returns what was read.
func record(c Conn) (stop func() []arrival) {
	start := time.Now()
	done := make(chan []arrival, 1)
	go func() {
		pkts := makePackets(16, 2048)
		var got []arrival
		for {
			k, err := c.ReadBatch(pkts)
			if err != nil {
				done <- got
				return
			}
			at := time.Since(start)
			for _, p := range pkts[:k] {
				got = append(got, arrival{tagOf(p.Bytes()), at})
			}
		}
	}()
	return func() []arrival {
		synctest.Wait()
		c.Close()
		return <-done
	}
}

// memPair returns a network made with cfg and Conns on hosts A and B;
// the caller closes the network.
func memPair(t testing.TB, cfg MemConfig) (*MemNetwork, Conn, Conn) {
	t.Helper()
	n := NewMemNetwork(cfg)
	return n, memOpen(t, n, hostA, 0), memOpen(t, n, hostB, 0)
}

// burst returns count packets of size bytes from c to port dst, tagged
// first, first+1, ...
func burst(c Conn, dst uint16, size, count int, first uint64) [][]byte {
	bufs := make([][]byte, count)
	for i := range bufs {
		bufs[i] = testPacket(c.Port(), dst, size, first+uint64(i))
	}
	return bufs
}

// series returns first, first+1, ... (count numbers).
func series(first uint64, count int) []uint64 {
	out := make([]uint64, count)
	for i := range out {
		out[i] = first + uint64(i)
	}
	return out
}

// tags returns the tags of got, in order.
func tags(got []arrival) []uint64 {
	out := make([]uint64, len(got))
	for i, a := range got {
		out[i] = a.tag
	}
	return out
}

// TestMemLinkSerialization sends 100 full-size packets in one batch and
// checks, on the fake clock, when each one is delivered.
func TestMemLinkSerialization(t *testing.T) {
	const count = 100
	for _, tc := range []struct {
		name       string
		cfg        MemConfig
		src, dst   netip.Addr
		first, gap time.Duration // delivery of packet i: first + i*gap
	}{
		{"100Mbps", MemConfig{LinkMbps: 100}, hostA, hostB, fullGap, fullGap},
		{"100Mbps/IPv6", MemConfig{LinkMbps: 100}, hostA6, hostB6, fullGap, fullGap},
		{"100Mbps/Delay", MemConfig{LinkMbps: 100, Delay: time.Millisecond}, hostA, hostB, time.Millisecond + fullGap, fullGap},
		{"1Gbps", MemConfig{LinkMbps: 1000}, hostA, hostB, 12 * time.Microsecond, 12 * time.Microsecond},
		{"HostOverride", MemConfig{LinkMbps: 1000, HostLinkMbps: map[netip.Addr]int{hostB: 100}}, hostA, hostB, fullGap, fullGap},
		{"HostInfinite", MemConfig{LinkMbps: 100, HostLinkMbps: map[netip.Addr]int{hostB: 0}}, hostA, hostB, 0, 0},
		{"NoLink", MemConfig{}, hostA, hostB, 0, 0},
		{"NoLink/Delay", MemConfig{Delay: time.Millisecond}, hostA, hostB, time.Millisecond, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := NewMemNetwork(tc.cfg)
				defer n.Close()
				a := memOpen(t, n, tc.src, 0)
				b := memOpen(t, n, tc.dst, 0)
				stop := record(b)
				// MaxPacket plus the IP header is 1,500 bytes in both families.
				writeAll(t, a, tc.dst, 0, burst(a, b.Port(), a.MaxPacket(tc.dst), count, 1)...)
				time.Sleep(tc.first + count*tc.gap)
				got := stop()
				if len(got) != count {
					t.Fatalf("%d packets delivered, want %d", len(got), count)
				}
				for i, g := range got {
					if want := (arrival{uint64(i + 1), tc.first + time.Duration(i)*tc.gap}); g != want {
						t.Fatalf("delivery %d: tag %d at %v, want tag %d at %v", i, g.tag, g.at, want.tag, want.at)
					}
				}
				if s := n.Stats(); s.MaxQueueDelay != time.Duration(count-1)*tc.gap {
					t.Errorf("MaxQueueDelay = %v, want %v", s.MaxQueueDelay, time.Duration(count-1)*tc.gap)
				}
			})
		})
	}
}

// TestMemLinkPerHost checks that each receiver has a downlink of its own
// that every sender shares.
func TestMemLinkPerHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewMemNetwork(MemConfig{LinkMbps: 100})
		defer n.Close()
		a := memOpen(t, n, hostA, 0)
		c := memOpen(t, n, hostC, 0)
		b := memOpen(t, n, hostB, 0)
		toB, toC := record(b), record(c)
		size := a.MaxPacket(hostB)
		writeAll(t, a, hostB, 0, burst(a, b.Port(), size, 10, 1)...)
		writeAll(t, a, hostC, 0, burst(a, c.Port(), size, 1, 100)...) // not behind the burst to B
		writeAll(t, c, hostB, 0, burst(c, b.Port(), size, 10, 11)...) // behind it
		time.Sleep(time.Second)
		if got, want := toC(), []arrival{{100, fullGap}}; !slices.Equal(got, want) {
			t.Errorf("C got %v, want %v", got, want)
		}
		got := toB()
		if len(got) != 20 || got[19] != (arrival{20, 20 * fullGap}) || !slices.IsSorted(tags(got)) {
			t.Errorf("B got %v, want tags 1..20 in order, the last at %v", got, 20*fullGap)
		}
	})
}

// TestMemLinkPriority reproduces a short message overtaking a long one:
// a priority-7 packet written while 200 priority-0 packets are queued at
// the receiver's downlink waits only for the packet on the wire.
func TestMemLinkPriority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const long, short = 200, 1000 // tags: 1..long, then the short one
		n := NewMemNetwork(MemConfig{LinkMbps: 100})
		defer n.Close()
		a := memOpen(t, n, hostA, 0)
		c := memOpen(t, n, hostC, 0)
		b := memOpen(t, n, hostB, 0)
		stop := record(b)
		size := a.MaxPacket(hostB)
		writeAll(t, a, hostB, 0, burst(a, b.Port(), size, long, 1)...)
		// At 1050 us packet 9 has been on the wire for 90 us; 191 wait.
		const sent = 1050 * time.Microsecond
		time.Sleep(sent)
		writeAll(t, c, hostB, 7, burst(c, b.Port(), size, 1, short)...)
		time.Sleep(long * fullGap)
		got := stop()

		i := slices.IndexFunc(got, func(a arrival) bool { return a.tag == short })
		if i < 0 {
			t.Fatalf("the priority-7 packet never came (%d others did)", len(got))
		}
		if at := got[i].at; at-sent > 2*fullGap || at != 10*fullGap {
			t.Errorf("priority-7 packet delivered %v after it was sent, at %v: want %v, within two packet times",
				at-sent, at, 10*fullGap-sent)
		}
		low := slices.Delete(slices.Clone(got), i, i+1)
		if !slices.Equal(tags(low), series(1, long)) || i != 9 {
			t.Errorf("got tags %v, want 1..%d in order with the short one after 9", tags(got), long)
		}
		if last := got[len(got)-1]; last.at != (long+1)*fullGap {
			t.Errorf("last packet at %v, want %v: the link idled", last.at, (long+1)*fullGap)
		}
		s := n.Stats()
		if s.DeliveredPackets[0] != long || s.DeliveredPackets[7] != 1 ||
			s.DeliveredBytes[0] != uint64(long*size) || s.DeliveredBytes[7] != uint64(size) {
			t.Errorf("per priority: packets %v, bytes %v", s.DeliveredPackets, s.DeliveredBytes)
		}
		// The last long packet reached the port at 0 and left it after
		// every other packet: it waited 200 packet times.
		if s.MaxQueueDelay != long*fullGap {
			t.Errorf("MaxQueueDelay = %v, want %v", s.MaxQueueDelay, long*fullGap)
		}
	})
}

// TestMemLinkPriorityOrder queues packets of every priority behind one on
// the wire: they leave highest priority first, FIFO within a priority.
func TestMemLinkPriorityOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, a, b := memPair(t, MemConfig{LinkMbps: 100})
		defer n.Close()
		stop := record(b)
		writeAll(t, a, hostB, 0, testPacket(a.Port(), b.Port(), 100, 100)) // on the wire at once
		pkts := make([]Packet, 24)
		for i := range pkts {
			buf := testPacket(a.Port(), b.Port(), 100, uint64(i+1))
			pkts[i] = Packet{Buf: buf, N: len(buf), Addr: hostB, Priority: uint8(i % 8)}
		}
		if k, err := a.WriteBatch(pkts); k != len(pkts) || err != nil {
			t.Fatalf("WriteBatch = %d, %v", k, err)
		}
		time.Sleep(time.Second)
		want := []uint64{100, 8, 16, 24, 7, 15, 23, 6, 14, 22, 5, 13, 21, 4, 12, 20, 3, 11, 19, 2, 10, 18, 1, 9, 17}
		if got := tags(stop()); !slices.Equal(got, want) {
			t.Errorf("delivered %v, want %v", got, want)
		}
		if got, want := n.Stats().DeliveredPackets, [8]uint64{4, 3, 3, 3, 3, 3, 3, 3}; got != want {
			t.Errorf("DeliveredPackets = %v, want %v", got, want)
		}
	})
}

// TestMemLinkBuffer fills a bounded downlink buffer: what does not fit is
// dropped, whatever its priority, and counted.
func TestMemLinkBuffer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const burstLen, fits = 50, 11 // one on the wire, ten in the buffer
		n, a, b := memPair(t, MemConfig{LinkMbps: 100, LinkBufferBytes: 10 * 1500})
		defer n.Close()
		size := a.MaxPacket(hostB)
		for round := range uint64(2) {
			first := 1 + round*burstLen
			writeAll(t, a, hostB, 0, burst(a, b.Port(), size, burstLen, first)...)
			writeAll(t, a, hostB, 7, testPacket(a.Port(), b.Port(), homaHeaderLen, 999)) // no room either
			time.Sleep(fits * fullGap)
			if got, want := drain(t, b), series(first, fits); !slices.Equal(got, want) {
				t.Fatalf("round %d: got %v, want %v", round, got, want)
			}
			s := n.Stats()
			sent := (round + 1) * (burstLen + 1)
			if s.Sent != sent || s.Delivered != (round+1)*fits || s.DroppedBuffer != s.Sent-s.Delivered {
				t.Errorf("round %d: stats %+v: want %d sent, %d delivered, the rest in DroppedBuffer", round, s, sent, (round+1)*fits)
			}
			if s.MaxLinkBacklog != 10*1500 {
				t.Errorf("MaxLinkBacklog = %d, want %d", s.MaxLinkBacklog, 10*1500)
			}
		}
	})
}

// TestMemLinkDeterministic runs a busy two-link network with every fault
// twice with one seed and once with another.
func TestMemLinkDeterministic(t *testing.T) {
	run := func(seed uint64) (got []arrival, s MemStats) {
		synctest.Test(t, func(t *testing.T) {
			n := NewMemNetwork(MemConfig{
				Seed: seed, LinkMbps: 200, HostLinkMbps: map[netip.Addr]int{hostC: 50},
				LinkBufferBytes: 20_000, Loss: 0.02, Duplicate: 0.02, Reorder: 0.05,
				Delay: 20 * time.Microsecond, Jitter: 10 * time.Microsecond,
			})
			defer n.Close()
			a := memOpen(t, n, hostA, 0)
			b := memOpen(t, n, hostB, 0)
			c := memOpen(t, n, hostC, 0)
			atB, atC := record(b), record(c)
			traffic := rand.New(rand.NewPCG(1, 2)) // the same for every seed
			for i := range 2000 {
				size := homaHeaderLen + traffic.IntN(a.MaxPacket(hostB)-homaHeaderLen+1)
				prio := uint8(traffic.IntN(8))
				src, dst, port := a, hostB, b.Port()
				if i%3 == 0 {
					src, dst, port = b, hostC, c.Port()
				}
				writeAll(t, src, dst, prio, testPacket(src.Port(), port, size, uint64(i)))
				time.Sleep(time.Duration(traffic.IntN(40)) * time.Microsecond)
			}
			time.Sleep(time.Second)
			got = append(atB(), atC()...)
			s = n.Stats()
		})
		return got, s
	}
	got1, s1 := run(5)
	got2, s2 := run(5)
	got3, _ := run(6)
	if !slices.Equal(got1, got2) || s1 != s2 {
		t.Errorf("same seed, different schedules: %d and %d deliveries, stats\n%+v\n%+v", len(got1), len(got2), s1, s2)
	}
	if slices.Equal(got1, got3) {
		t.Errorf("seeds 5 and 6 gave the same %d deliveries", len(got1))
	}
	var perPrio uint64
	for p, k := range s1.DeliveredPackets {
		if k == 0 {
			t.Errorf("nothing delivered at priority %d", p)
		}
		perPrio += k
	}
	if perPrio != s1.Delivered || uint64(len(got1)) != s1.Delivered {
		t.Errorf("%d read, %d delivered, %d by priority", len(got1), s1.Delivered, perPrio)
	}
	if s1.Lost == 0 || s1.Duplicated == 0 || s1.Reordered == 0 || s1.DroppedBuffer == 0 || s1.MaxQueueDelay == 0 {
		t.Errorf("not every mechanism was exercised: %+v", s1)
	}
	if want := s1.Sent - s1.Lost + s1.Duplicated - s1.DroppedBuffer; s1.Delivered != want {
		t.Errorf("Delivered = %d, want Sent - Lost + Duplicated - DroppedBuffer = %d", s1.Delivered, want)
	}
}

// TestMemLinkClose closes every Conn while packets wait at a downlink:
// they are counted, the links forgotten and the timer stopped.
func TestMemLinkClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, a, b := memPair(t, MemConfig{LinkMbps: 100})
		writeAll(t, a, hostB, 0, burst(a, b.Port(), a.MaxPacket(hostB), 20, 1)...)
		time.Sleep(5 * fullGap)
		if got := drain(t, b); len(got) != 5 {
			t.Fatalf("%d packets delivered after %v, want 5", len(got), 5*fullGap)
		}
		n.Close()
		s := n.Stats()
		if s.Delivered != 5 || s.DroppedNoListener != 15 { // one on the wire, 14 queued
			t.Errorf("stats %+v: want 5 delivered, 15 dropped for want of a listener", s)
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		if len(n.flight) != 0 || len(n.links) != 0 || n.queued != 0 || n.timer.Stop() {
			t.Errorf("after Close: %d in flight, %d links, %d queued, timer armed %v",
				len(n.flight), len(n.links), n.queued, n.timer.Stop())
		}
	})
}

// TestMemLinkSameInstant checks that a packet reaching the switch port at
// the instant the link frees joins the queue after the link has chosen
// its next packet, whether it was written then or delayed until then.
func TestMemLinkSameInstant(t *testing.T) {
	for _, delay := range []time.Duration{0, time.Millisecond} {
		synctest.Test(t, func(t *testing.T) {
			n, a, b := memPair(t, MemConfig{LinkMbps: 100, Delay: delay})
			defer n.Close()
			stop := record(b)
			size := a.MaxPacket(hostB)
			writeAll(t, a, hostB, 0, burst(a, b.Port(), size, 2, 1)...)
			time.Sleep(fullGap) // packet 2 starts at delay+fullGap, as packet 3 arrives
			writeAll(t, a, hostB, 7, burst(a, b.Port(), size, 1, 3)...)
			time.Sleep(time.Second)
			want := []arrival{{1, delay + fullGap}, {2, delay + 2*fullGap}, {3, delay + 3*fullGap}}
			if got := stop(); !slices.Equal(got, want) {
				t.Errorf("delay %v: got %v, want %v", delay, got, want)
			}
		})
	}
}

// TestMemLinkReorder checks that a reordered packet is held back at its
// Conn after it leaves the downlink.
func TestMemLinkReorder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, a, b := memPair(t, MemConfig{LinkMbps: 100, Reorder: 1})
		defer n.Close()
		stop := record(b)
		writeAll(t, a, hostB, 0, burst(a, b.Port(), a.MaxPacket(hostB), 1, 1)...)
		time.Sleep(time.Second)
		if got, want := stop(), []arrival{{1, fullGap + MemReorderHold}}; !slices.Equal(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		n, a, b := memPair(t, MemConfig{Seed: 1, LinkMbps: 100, Reorder: 0.3})
		defer n.Close()
		stop := record(b)
		writeAll(t, a, hostB, 0, burst(a, b.Port(), a.MaxPacket(hostB), 100, 1)...)
		time.Sleep(time.Second)
		got := stop()
		if len(got) != 100 || slices.IsSorted(tags(got)) {
			t.Fatalf("got %v: want 100 packets, some overtaken", tags(got))
		}
		for _, g := range got {
			// Packet k left the link at k packet times.
			if left := time.Duration(g.tag) * fullGap; g.at < left || g.at > left+MemReorderHold {
				t.Errorf("packet %d delivered at %v, want within %v of %v", g.tag, g.at, MemReorderHold, left)
			}
			// Until the last one is through, a held packet is released
			// by the next delivery, as a packet leaves the link.
			if g.at < 100*fullGap && g.at%fullGap != 0 {
				t.Errorf("packet %d delivered at %v, between two packets leaving the link", g.tag, g.at)
			}
		}
	})
}

// TestMemLinkCatchUp stops the timer, as if its goroutine had not run
// yet, and checks that readers and writers run the events due first.
func TestMemLinkCatchUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, a, b := memPair(t, MemConfig{LinkMbps: 100})
		defer n.Close()
		stopTimer := func() {
			n.mu.Lock()
			n.timer.Stop()
			n.mu.Unlock()
		}
		size := a.MaxPacket(hostB)
		writeAll(t, a, hostB, 0, burst(a, b.Port(), size, 2, 1)...)
		stopTimer()
		time.Sleep(fullGap + fullGap/2)
		// Packet 1 is through and packet 2 on the wire: packet 3 queues
		// behind it, however high its priority.
		writeAll(t, a, hostB, 7, burst(a, b.Port(), size, 1, 3)...)
		stopTimer()
		time.Sleep(fullGap / 2)
		if got := drain(t, b); !slices.Equal(got, []uint64{1, 2}) {
			t.Errorf("after two packet times, read %v, want [1 2]", got)
		}
		stopTimer()
		time.Sleep(fullGap)
		if got := drain(t, b); !slices.Equal(got, []uint64{3}) {
			t.Errorf("after three packet times, read %v, want [3]", got)
		}
	})
}

// TestMemLinkInFlightLimit checks that copies queued at a downlink count
// towards the bound on copies held inside the network.
func TestMemLinkInFlightLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const count = memMaxInFlight + 100
		n, a, b := memPair(t, MemConfig{LinkMbps: 1, MTU: 100})
		defer n.Close()
		pkt := testPacket(a.Port(), b.Port(), homaHeaderLen, 1)
		pkts := make([]Packet, count)
		for i := range pkts {
			pkts[i] = Packet{Buf: pkt, N: len(pkt), Addr: hostB}
		}
		if k, err := a.WriteBatch(pkts); k != count || err != nil {
			t.Fatalf("WriteBatch = %d, %v", k, err)
		}
		if s := n.Stats(); s.DroppedInFlight != count-memMaxInFlight {
			t.Errorf("DroppedInFlight = %d, want %d", s.DroppedInFlight, count-memMaxInFlight)
		}
	})
}
