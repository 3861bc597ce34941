package memnet

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/homa/netio"
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
func record(c netio.Conn) (stop func() []arrival) {
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
func memPair(t testing.TB, cfg Config) (*Network, netio.Conn, netio.Conn) {
	t.Helper()
	n := New(cfg)
	return n, memOpen(t, n, hostA, 0), memOpen(t, n, hostB, 0)
}

// memTrio returns a network made with cfg and Conns on hosts A, C and B;
// the caller closes the network.
func memTrio(t testing.TB, cfg Config) (n *Network, a, c, b netio.Conn) {
	t.Helper()
	n = New(cfg)
	return n, memOpen(t, n, hostA, 0), memOpen(t, n, hostC, 0), memOpen(t, n, hostB, 0)
}

// burst returns count packets of size bytes from c to port dst, tagged
// first, first+1, ...
func burst(c netio.Conn, dst uint16, size, count int, first uint64) [][]byte {
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

// linkBurst opens Conns at src and dst on a network made with cfg, writes
// count full-size packets (1,500 bytes of IP) from one to the other, all
// at once when pace is zero, else one every pace, and returns what dst
// read, with the stats. It must run in a synctest bubble.
func linkBurst(t *testing.T, cfg Config, src, dst netip.Addr, count int, pace time.Duration) ([]arrival, Stats) {
	t.Helper()
	n := New(cfg)
	defer n.Close()
	a := memOpen(t, n, src, 0)
	b := memOpen(t, n, dst, 0)
	stop := record(b)
	// MaxPacket plus the IP header is 1,500 bytes in both families.
	bufs := burst(a, b.Port(), a.MaxPacket(dst), count, 1)
	if pace == 0 {
		writeAll(t, a, dst, 0, bufs...)
	}
	for i := range bufs {
		if pace > 0 {
			writeAll(t, a, dst, 0, bufs[i])
			time.Sleep(pace)
		}
	}
	time.Sleep(time.Second)
	return stop(), n.Stats()
}

// checkEvenly checks that got is tags 1..count in order, tag i+1
// delivered at first + i*gap.
func checkEvenly(t *testing.T, got []arrival, count int, first, gap time.Duration) {
	t.Helper()
	if len(got) != count {
		t.Fatalf("%d packets delivered, want %d", len(got), count)
	}
	for i, g := range got {
		if want := (arrival{uint64(i + 1), first + time.Duration(i)*gap}); g != want {
			t.Fatalf("delivery %d: tag %d at %v, want tag %d at %v", i, g.tag, g.at, want.tag, want.at)
		}
	}
}

// linkMax is the part of Stats about queueing at links.
type linkMax struct {
	queueDelay, upQueueDelay time.Duration
	backlog, upBacklog       int
}

func linkMaxOf(s Stats) linkMax {
	return linkMax{s.MaxQueueDelay, s.MaxUplinkQueueDelay, s.MaxLinkBacklog, s.MaxUplinkBacklog}
}

// serialCase is a burst of 100 full-size packets from src to dst, in one
// batch, on a network made with cfg: packet i (from 0) is delivered at
// first + i*gap.
type serialCase struct {
	name       string
	cfg        Config
	src, dst   netip.Addr
	first, gap time.Duration
}

// runSerial runs each case as a subtest and checks the deliveries and
// the queueing that want gives for the case.
func runSerial(t *testing.T, cases []serialCase, want func(serialCase) linkMax) {
	const count = 100
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				got, s := linkBurst(t, tc.cfg, tc.src, tc.dst, count, 0)
				checkEvenly(t, got, count, tc.first, tc.gap)
				if got, want := linkMaxOf(s), want(tc); got != want {
					t.Errorf("queueing %+v, want %+v", got, want)
				}
			})
		})
	}
}

// burstQueue is the queueing a burst of 100 full-size packets meets at a
// link that sends one every gap: the last waits 99 gaps, behind 99
// others when the link is not infinitely fast.
func burstQueue(gap time.Duration) (delay time.Duration, backlog int) {
	if gap == 0 {
		return 0, 0
	}
	return 99 * gap, 99 * 1500
}

// TestMemLinkSerialization sends 100 full-size packets in one batch and
// checks, on the fake clock, when each one is delivered, and the queue at
// the receiver's downlink.
func TestMemLinkSerialization(t *testing.T) {
	runSerial(t, []serialCase{
		{"100Mbps", Config{LinkMbps: 100}, hostA, hostB, fullGap, fullGap},
		{"100Mbps/IPv6", Config{LinkMbps: 100}, hostA6, hostB6, fullGap, fullGap},
		{"100Mbps/Delay", Config{LinkMbps: 100, Delay: time.Millisecond}, hostA, hostB, time.Millisecond + fullGap, fullGap},
		{"1Gbps", Config{LinkMbps: 1000}, hostA, hostB, 12 * time.Microsecond, 12 * time.Microsecond},
		{"HostOverride", Config{LinkMbps: 1000, HostLinkMbps: map[netip.Addr]int{hostB: 100}}, hostA, hostB, fullGap, fullGap},
		{"HostInfinite", Config{LinkMbps: 100, HostLinkMbps: map[netip.Addr]int{hostB: 0}}, hostA, hostB, 0, 0},
		{"NoLink", Config{}, hostA, hostB, 0, 0},
		{"NoLink/Delay", Config{Delay: time.Millisecond}, hostA, hostB, time.Millisecond, 0},
	}, func(tc serialCase) (m linkMax) {
		m.queueDelay, m.backlog = burstQueue(tc.gap)
		return m
	})
}

// TestMemUplinkSerialization sends 100 full-size packets in one batch
// through the sender's uplink alone: they leave it, and are delivered,
// one packet time apart (120 us at 100 Mbit/s), the queue building at
// the uplink.
func TestMemUplinkSerialization(t *testing.T) {
	runSerial(t, []serialCase{
		{"100Mbps", Config{UplinkMbps: 100}, hostA, hostB, fullGap, fullGap},
		{"100Mbps/IPv6", Config{UplinkMbps: 100}, hostA6, hostB6, fullGap, fullGap},
		{"100Mbps/Delay", Config{UplinkMbps: 100, Delay: time.Millisecond}, hostA, hostB, time.Millisecond + fullGap, fullGap},
		{"1Gbps", Config{UplinkMbps: 1000}, hostA, hostB, 12 * time.Microsecond, 12 * time.Microsecond},
		{"HostOverride", Config{UplinkMbps: 1000, HostUplinkMbps: map[netip.Addr]int{hostA: 100}}, hostA, hostB, fullGap, fullGap},
		{"HostOverride/Mapped", Config{HostUplinkMbps: map[netip.Addr]int{netip.AddrFrom16(hostA.As16()): 100}}, hostA, hostB, fullGap, fullGap},
		{"OtherHost", Config{HostUplinkMbps: map[netip.Addr]int{hostB: 100}}, hostA, hostB, 0, 0},
		{"HostInfinite", Config{UplinkMbps: 100, HostUplinkMbps: map[netip.Addr]int{hostA: 0}}, hostA, hostB, 0, 0},
	}, func(tc serialCase) (m linkMax) {
		m.upQueueDelay, m.upBacklog = burstQueue(tc.gap)
		return m
	})
}

// TestMemUplinkDownlink sends 100 full-size packets through an uplink and
// a downlink, at once or one every 60 us (200 Mbit/s): the queue builds
// in front of the slower link, and a packet leaving the uplink as the
// downlink frees finds it idle.
func TestMemUplinkDownlink(t *testing.T) {
	const (
		count = 100
		us    = time.Microsecond
		fast  = 12 * us // a packet time at 1 Gbit/s
		pace  = 60 * us
	)
	for _, tc := range []struct {
		name       string
		up, down   int
		delay      time.Duration
		pace       time.Duration
		first, gap time.Duration // delivery of packet i: first + i*gap
		want       linkMax
	}{
		// Packet i (from 0) leaves the uplink at 12(i+1) us and waits
		// for the downlink until 12 + 120i us: 108i us, the others
		// piling up behind it (i - i/10 of them).
		{"UplinkFaster", 1000, 100, 0, 0, fast + fullGap, fullGap,
			linkMax{queueDelay: 99 * 108 * us, upQueueDelay: 99 * fast, backlog: 90 * 1500, upBacklog: 99 * 1500}},
		// Packet i leaves the uplink at 120(i+1) us, the downlink idle.
		{"UplinkSlower", 100, 1000, 0, 0, fullGap + fast, fullGap,
			linkMax{upQueueDelay: 99 * fullGap, upBacklog: 99 * 1500}},
		{"Equal", 100, 100, 0, 0, 2 * fullGap, fullGap,
			linkMax{upQueueDelay: 99 * fullGap, upBacklog: 99 * 1500}},
		{"Equal/Delay", 100, 100, time.Millisecond, 0, time.Millisecond + 2*fullGap, fullGap,
			linkMax{upQueueDelay: 99 * fullGap, upBacklog: 99 * 1500}},
		// Written at 60i us, packet i crosses the uplink at once and
		// waits 60i us for the downlink, behind ceil(i/2) others.
		{"UplinkFaster/Paced", 1000, 100, 0, pace, fast + fullGap, fullGap,
			linkMax{queueDelay: 99 * pace, backlog: 50 * 1500}},
		// The mirror image: packet i waits 60i us for the uplink.
		{"UplinkSlower/Paced", 100, 1000, 0, pace, fullGap + fast, fullGap,
			linkMax{upQueueDelay: 99 * pace, upBacklog: 50 * 1500}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := Config{UplinkMbps: tc.up, LinkMbps: tc.down, Delay: tc.delay}
				got, s := linkBurst(t, cfg, hostA, hostB, count, tc.pace)
				checkEvenly(t, got, count, tc.first, tc.gap)
				if got := linkMaxOf(s); got != tc.want {
					t.Errorf("queueing %+v, want %+v", got, tc.want)
				}
			})
		})
	}
}

// TestMemLinkPerHost checks that each receiver has a downlink of its own
// that every sender shares.
func TestMemLinkPerHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, a, c, b := memTrio(t, Config{LinkMbps: 100})
		defer n.Close()
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
		n, a, c, b := memTrio(t, Config{LinkMbps: 100})
		defer n.Close()
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
// the wire: a downlink sends them highest priority first, FIFO within a
// priority; an uplink strictly in the order written, and so does a
// downlink fed by an uplink of the same rate, as nothing queues there.
func TestMemLinkPriorityOrder(t *testing.T) {
	byPriority := []uint64{100, 8, 16, 24, 7, 15, 23, 6, 14, 22, 5, 13, 21, 4, 12, 20, 3, 11, 19, 2, 10, 18, 1, 9, 17}
	written := append([]uint64{100}, series(1, 24)...)
	for _, tc := range []struct {
		name string
		cfg  Config
		want []uint64
	}{
		{"Downlink", Config{LinkMbps: 100}, byPriority},
		{"Uplink", Config{UplinkMbps: 100}, written},
		{"Both", Config{UplinkMbps: 100, LinkMbps: 100}, written},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n, a, b := memPair(t, tc.cfg)
				defer n.Close()
				stop := record(b)
				writeAll(t, a, hostB, 0, testPacket(a.Port(), b.Port(), 100, 100)) // on the wire at once
				pkts := make([]netio.Packet, 24)
				for i := range pkts {
					buf := testPacket(a.Port(), b.Port(), 100, uint64(i+1))
					pkts[i] = netio.Packet{Buf: buf, N: len(buf), Addr: hostB, Priority: uint8(i % 8)}
				}
				if k, err := a.WriteBatch(pkts); k != len(pkts) || err != nil {
					t.Fatalf("WriteBatch = %d, %v", k, err)
				}
				time.Sleep(time.Second)
				if got := tags(stop()); !slices.Equal(got, tc.want) {
					t.Errorf("delivered %v, want %v", got, tc.want)
				}
				if got, want := n.Stats().DeliveredPackets, [8]uint64{4, 3, 3, 3, 3, 3, 3, 3}; got != want {
					t.Errorf("DeliveredPackets = %v, want %v", got, want)
				}
			})
		})
	}
}

// TestMemUplinkFIFO writes a priority-7 packet from a second Conn of the
// sending host while 50 priority-0 packets wait behind the one on the
// wire. At an uplink it waits behind all of them: the head-of-line
// blocking of a NIC queue. At a downlink it waits for the one on the
// wire only.
func TestMemUplinkFIFO(t *testing.T) {
	const long, short = 51, 1000 // tags: 1..long, then the short one
	for _, tc := range []struct {
		name  string
		cfg   Config
		index int // position of the short packet among the deliveries
	}{
		{"Uplink", Config{UplinkMbps: 100}, long},
		{"Downlink", Config{LinkMbps: 100}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n, a, b := memPair(t, tc.cfg)
				defer n.Close()
				a2 := memOpen(t, n, hostA, 0)
				stop := record(b)
				size := a.MaxPacket(hostB)
				writeAll(t, a, hostB, 0, burst(a, b.Port(), size, long, 1)...)
				writeAll(t, a2, hostB, 7, burst(a2, b.Port(), size, 1, short)...)
				time.Sleep(time.Second)
				got := stop()
				want := slices.Insert(series(1, long), tc.index, short)
				if !slices.Equal(tags(got), want) {
					t.Fatalf("delivered %v, want %v", tags(got), want)
				}
				if at, want := got[tc.index].at, time.Duration(tc.index+1)*fullGap; at != want {
					t.Errorf("priority-7 packet delivered at %v, want %v", at, want)
				}
				if last := got[long].at; last != (long+1)*fullGap {
					t.Errorf("last packet at %v, want %v", last, (long+1)*fullGap)
				}
			})
		})
	}
}

// TestMemUplinkPerHost checks that each sending host has an uplink of its
// own, which all its Conns share, at its own rate.
func TestMemUplinkPerHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(Config{UplinkMbps: 100, HostUplinkMbps: map[netip.Addr]int{hostC: 1000}})
		defer n.Close()
		a1 := memOpen(t, n, hostA, 0)
		a2 := memOpen(t, n, hostA, 0)
		c := memOpen(t, n, hostC, 0)
		b := memOpen(t, n, hostB, 0)
		stop := record(b)
		size := a1.MaxPacket(hostB)
		writeAll(t, a1, hostB, 0, burst(a1, b.Port(), size, 10, 1)...)
		writeAll(t, a2, hostB, 0, burst(a2, b.Port(), size, 10, 11)...) // behind a1's
		writeAll(t, c, hostB, 0, burst(c, b.Port(), size, 10, 101)...)  // not behind them
		time.Sleep(time.Second)
		got := stop()
		if len(got) != 30 {
			t.Fatalf("got %v, want 30 packets", got)
		}
		for _, g := range got {
			want := time.Duration(g.tag) * fullGap
			if g.tag > 100 {
				want = time.Duration(g.tag-100) * 12 * time.Microsecond
			}
			if g.at != want {
				t.Errorf("packet %d delivered at %v, want %v", g.tag, g.at, want)
			}
		}
	})
}

// TestMemLinkBuffer fills a bounded downlink buffer: what does not fit is
// dropped, whatever its priority, and counted.
func TestMemLinkBuffer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const burstLen, fits = 50, 11 // one on the wire, ten in the buffer
		n, a, b := memPair(t, Config{LinkMbps: 100, LinkBufferBytes: 10 * 1500})
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
	s := checkDeterministic(t, Config{
		LinkMbps: 200, HostLinkMbps: map[netip.Addr]int{hostC: 50},
		LinkBufferBytes: 20_000, Loss: 0.02, Duplicate: 0.02, Reorder: 0.05,
		Delay: 20 * time.Microsecond, Jitter: 10 * time.Microsecond,
	})
	if s.MaxUplinkQueueDelay != 0 || s.MaxUplinkBacklog != 0 {
		t.Errorf("queueing at uplinks there are not: %+v", s)
	}
}

// TestMemUplinkDeterministic does the same with an uplink in front of
// every sender, one of them slower than the traffic it sends.
func TestMemUplinkDeterministic(t *testing.T) {
	s := checkDeterministic(t, Config{
		UplinkMbps: 1000, HostUplinkMbps: map[netip.Addr]int{hostB: 150},
		LinkMbps: 200, HostLinkMbps: map[netip.Addr]int{hostC: 50},
		LinkBufferBytes: 20_000, Loss: 0.02, Duplicate: 0.02, Reorder: 0.05,
		Delay: 20 * time.Microsecond, Jitter: 10 * time.Microsecond,
	})
	if s.MaxUplinkQueueDelay == 0 || s.MaxUplinkBacklog == 0 {
		t.Errorf("nothing queued at the uplinks: %+v", s)
	}
}

// checkDeterministic runs 2,000 packets of random sizes and priorities,
// two thirds from A to B and the rest from B to C, on a network made with
// cfg and seeds 5, 5 and 6. It checks that the first two runs agree and
// differ from the third, that every fault and drop of cfg happened, and
// the accounting. It returns the stats of the first run.
func checkDeterministic(t *testing.T, cfg Config) Stats {
	t.Helper()
	run := func(seed uint64) (got []arrival, s Stats) {
		synctest.Test(t, func(t *testing.T) {
			cfg := cfg
			cfg.Seed = seed
			n := New(cfg)
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
	return s1
}

// TestMemLinkClose closes every Conn while packets wait at a link: they
// are counted, the links forgotten and the timer stopped.
func TestMemLinkClose(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cfg       Config
		delivered uint64 // by 5 packet times, of 20
	}{
		{"Downlink", Config{LinkMbps: 100}, 5}, // one on the wire, 14 queued
		{"Uplink", Config{UplinkMbps: 100}, 5},
		// Packet 5 has just gone from the uplink onto the downlink.
		{"Both", Config{UplinkMbps: 100, LinkMbps: 100}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n, a, b := memPair(t, tc.cfg)
				writeAll(t, a, hostB, 0, burst(a, b.Port(), a.MaxPacket(hostB), 20, 1)...)
				time.Sleep(5 * fullGap)
				if got := drain(t, b); uint64(len(got)) != tc.delivered {
					t.Fatalf("%d packets delivered after %v, want %d", len(got), 5*fullGap, tc.delivered)
				}
				n.Close()
				s := n.Stats()
				if s.Delivered != tc.delivered || s.DroppedNoListener != 20-tc.delivered {
					t.Errorf("stats %+v: want %d delivered, the rest dropped for want of a listener", s, tc.delivered)
				}
				n.mu.Lock()
				defer n.mu.Unlock()
				if len(n.flight) != 0 || len(n.links) != 0 || len(n.uplinks) != 0 || n.queued != 0 || n.timer.Stop() {
					t.Errorf("after Close: %d in flight, %d links, %d uplinks, %d queued, timer armed %v",
						len(n.flight), len(n.links), len(n.uplinks), n.queued, n.timer.Stop())
				}
			})
		})
	}
}

// TestMemUplinkSenderClose closes the sending Conn while its packets wait
// at the uplink: as from a NIC, they still go out.
func TestMemUplinkSenderClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, a, b := memPair(t, Config{UplinkMbps: 100})
		defer n.Close()
		stop := record(b)
		writeAll(t, a, hostB, 0, burst(a, b.Port(), a.MaxPacket(hostB), 20, 1)...)
		time.Sleep(5*fullGap + fullGap/2)
		a.Close()
		time.Sleep(time.Second)
		got := stop()
		checkEvenly(t, got, 20, fullGap, fullGap)
	})
}

// TestMemLinkSameInstant checks that a packet reaching the switch port at
// the instant the link frees joins the queue after the link has chosen
// its next packet, whether it was written then or delayed until then.
func TestMemLinkSameInstant(t *testing.T) {
	for _, delay := range []time.Duration{0, time.Millisecond} {
		synctest.Test(t, func(t *testing.T) {
			n, a, b := memPair(t, Config{LinkMbps: 100, Delay: delay})
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
	// The same for a packet coming off an uplink as the downlink frees,
	// though the uplink started on it before the downlink on packet 1.
	synctest.Test(t, func(t *testing.T) {
		n, a, c, b := memTrio(t, Config{LinkMbps: 100, UplinkMbps: 100, HostUplinkMbps: map[netip.Addr]int{hostC: 0}})
		defer n.Close()
		stop := record(b)
		size := a.MaxPacket(hostB)
		writeAll(t, a, hostB, 7, burst(a, b.Port(), size, 1, 3)...) // off the uplink at fullGap
		writeAll(t, c, hostB, 0, burst(c, b.Port(), size, 2, 1)...)
		time.Sleep(time.Second)
		want := []arrival{{1, fullGap}, {2, 2 * fullGap}, {3, 3 * fullGap}}
		if got := stop(); !slices.Equal(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})
}

// TestMemLinkReorder checks that a reordered packet is held back at its
// Conn after it leaves the downlink.
func TestMemLinkReorder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, a, b := memPair(t, Config{LinkMbps: 100, Reorder: 1})
		defer n.Close()
		stop := record(b)
		writeAll(t, a, hostB, 0, burst(a, b.Port(), a.MaxPacket(hostB), 1, 1)...)
		time.Sleep(time.Second)
		if got, want := stop(), []arrival{{1, fullGap + ReorderHold}}; !slices.Equal(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		n, a, b := memPair(t, Config{Seed: 1, LinkMbps: 100, Reorder: 0.3})
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
			if left := time.Duration(g.tag) * fullGap; g.at < left || g.at > left+ReorderHold {
				t.Errorf("packet %d delivered at %v, want within %v of %v", g.tag, g.at, ReorderHold, left)
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
		n, a, b := memPair(t, Config{LinkMbps: 100})
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

// TestMemLinkInFlightLimit checks that copies queued at a downlink or an
// uplink count towards the bound on copies held inside the network.
func TestMemLinkInFlightLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"Downlink", Config{LinkMbps: 1, MTU: 100}},
		{"Uplink", Config{UplinkMbps: 1, MTU: 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const count = maxInFlight + 100
				n, a, b := memPair(t, tc.cfg)
				defer n.Close()
				pkt := testPacket(a.Port(), b.Port(), homaHeaderLen, 1)
				pkts := make([]netio.Packet, count)
				for i := range pkts {
					pkts[i] = netio.Packet{Buf: pkt, N: len(pkt), Addr: hostB}
				}
				if k, err := a.WriteBatch(pkts); k != count || err != nil {
					t.Fatalf("WriteBatch = %d, %v", k, err)
				}
				if s := n.Stats(); s.DroppedInFlight != count-maxInFlight {
					t.Errorf("DroppedInFlight = %d, want %d", s.DroppedInFlight, count-maxInFlight)
				}
			})
		})
	}
}
