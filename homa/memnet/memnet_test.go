package memnet

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/homa/netio"
)

var (
	hostA  = netip.MustParseAddr("10.0.0.1")
	hostB  = netip.MustParseAddr("10.0.0.2")
	hostA6 = netip.MustParseAddr("fd00::1")
)

func memOpen(t testing.TB, n *Network, addr netip.Addr, port uint16) netio.Conn {
	t.Helper()
	c, err := n.Open(addr, port)
	if err != nil {
		t.Fatalf("Open(%v, %d): %v", addr, port, err)
	}
	return c
}

// memPairs runs f, as a subtest per address family, with two Conns a
// (on src) and b (on dst) of a new in-memory network of cfg.
func memPairs(t *testing.T, cfg Config, f func(t *testing.T, a, b netio.Conn, src, dst netip.Addr)) {
	for _, fam := range []struct {
		name     string
		src, dst netip.Addr
	}{{"ipv4", hostA, hostB}, {"ipv6", hostA6, netip.MustParseAddr("fd00::2")}} {
		t.Run(fam.name, func(t *testing.T) {
			n := New(cfg)
			defer n.Close()
			f(t, memOpen(t, n, fam.src, 0), memOpen(t, n, fam.dst, 0), fam.src, fam.dst)
		})
	}
}

// drain reads everything c has ready and returns the tags in order.
func drain(t testing.TB, c netio.Conn) []uint64 {
	t.Helper()
	pkts := makePackets(16, 2048)
	var tags []uint64
	for {
		n, err := c.(netio.Poller).TryReadBatch(pkts)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return tags
		}
		for _, p := range pkts[:n] {
			tags = append(tags, tagOf(p.Bytes()))
		}
	}
}

func TestMemExchange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(Config{})
		defer n.Close()
		a := memOpen(t, n, hostA, 0)
		b := memOpen(t, n, hostB, 100)
		if a.Port() != netio.MinClientPort || b.Port() != 100 || a.LocalAddr() != hostA {
			t.Fatalf("ports %d, %d; addr %v", a.Port(), b.Port(), a.LocalAddr())
		}
		for _, size := range []int{homaHeaderLen, 1000, a.MaxPacket(hostB)} {
			out := testPacket(a.Port(), b.Port(), size, uint64(size))
			writeAll(t, a, hostB, 0, out)
			out[size-1] ^= 0xff // the network copied it
			got := readN(t, b, 1)[0]
			out[size-1] ^= 0xff
			if !bytes.Equal(got.data, out) || got.addr != hostA {
				t.Fatalf("size %d: got %d bytes from %v", size, len(got.data), got.addr)
			}
		}
		if got := a.MaxPacket(hostB); got != 1480 {
			t.Errorf("MaxPacket(v4) = %d, want 1480", got)
		}
		if got := a.MaxPacket(hostA6); got != 1460 {
			t.Errorf("MaxPacket(v6) = %d, want 1460", got)
		}
		big := testPacket(a.Port(), b.Port(), 1481, 1)
		if k, err := a.WriteBatch([]netio.Packet{{Buf: big, N: len(big), Addr: hostB}}); k != 0 || !errors.Is(err, netio.ErrBadPacket) {
			t.Errorf("WriteBatch above MaxPacket = %d, %v; want netio.ErrBadPacket", k, err)
		}
		if k, err := a.WriteBatch([]netio.Packet{{Buf: big, N: 100, Addr: hostA6}}); k != 0 || !errors.Is(err, netio.ErrBadAddr) {
			t.Errorf("WriteBatch to the other family = %d, %v; want netio.ErrBadAddr", k, err)
		}
		// A Buf too small for the packet: discarded and counted.
		writeAll(t, a, hostB, 0, testPacket(a.Port(), b.Port(), 500, 2), testPacket(a.Port(), b.Port(), 50, 3))
		small := []netio.Packet{{Buf: make([]byte, 100)}}
		if k, err := b.ReadBatch(small); k != 1 || err != nil || tagOf(small[0].Bytes()) != 3 {
			t.Errorf("ReadBatch after a too-large packet = %d, %v, tag %#x", k, err, tagOf(small[0].Bytes()))
		}
		if s := n.Stats(); s.DroppedTruncated != 1 {
			t.Errorf("DroppedTruncated = %d, want 1", s.DroppedTruncated)
		}
		if s := b.(netio.StatsConn).Stats(); s.Read != 4 || s.Discarded != 1 {
			t.Errorf("B stats = %+v", s)
		}
	})
}

func TestMemPorts(t *testing.T) {
	n := New(Config{})
	defer n.Close()
	a := memOpen(t, n, hostA, 0)
	b := memOpen(t, n, hostA, 0)
	if a.Port() == b.Port() {
		t.Fatalf("two client Conns share port %d", a.Port())
	}
	if _, err := n.Open(hostA, a.Port()); !errors.Is(err, netio.ErrPortInUse) {
		t.Fatalf("Open(taken) = %v, want netio.ErrPortInUse", err)
	}
	memOpen(t, n, hostB, a.Port()).Close() // another host: free
	a.Close()
	memOpen(t, n, hostA, a.Port())
	for _, bad := range []netip.Addr{{}, netip.IPv4Unspecified()} {
		if _, err := n.Open(bad, 0); !errors.Is(err, netio.ErrBadAddr) {
			t.Errorf("Open(%v) = %v, want netio.ErrBadAddr", bad, err)
		}
	}
	n.Close()
	if _, err := n.Open(hostB, 0); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Open after Close = %v, want net.ErrClosed", err)
	}
}

// memRun sends count packets from A to B, one write per packet, and
// returns the tags B received in order, with the stats. It must run in a
// synctest bubble.
func memRun(t *testing.T, cfg Config, count int) ([]uint64, Stats) {
	n := New(cfg)
	defer n.Close()
	a := memOpen(t, n, hostA, 0)
	b := memOpen(t, n, hostB, 0)
	var tags []uint64
	for i := range count {
		writeAll(t, a, hostB, uint8(i%8), testPacket(a.Port(), b.Port(), 64, uint64(i+1)))
		if i%100 == 99 {
			time.Sleep(time.Millisecond)
			tags = append(tags, drain(t, b)...)
		}
	}
	time.Sleep(cfg.Delay + cfg.Jitter + ReorderHold + time.Millisecond)
	tags = append(tags, drain(t, b)...)
	return tags, n.Stats()
}

func TestMemDeterministic(t *testing.T) {
	cfg := Config{Seed: 42, Loss: 0.05, Duplicate: 0.05, Reorder: 0.1, Delay: 50 * time.Microsecond, Jitter: 30 * time.Microsecond}
	var runs [3][]uint64
	synctest.Test(t, func(t *testing.T) { runs[0], _ = memRun(t, cfg, 2000) })
	synctest.Test(t, func(t *testing.T) { runs[1], _ = memRun(t, cfg, 2000) })
	cfg.Seed = 43
	synctest.Test(t, func(t *testing.T) { runs[2], _ = memRun(t, cfg, 2000) })
	if !slices.Equal(runs[0], runs[1]) {
		t.Errorf("same seed, different deliveries (%d and %d packets)", len(runs[0]), len(runs[1]))
	}
	if slices.Equal(runs[0], runs[2]) {
		t.Errorf("seeds 42 and 43 gave the same %d deliveries", len(runs[0]))
	}
}

func TestMemFaultRates(t *testing.T) {
	const count = 10000
	cfg := Config{Seed: 7, Loss: 0.1, Duplicate: 0.05, Reorder: 0.05}
	synctest.Test(t, func(t *testing.T) {
		tags, s := memRun(t, cfg, count)
		// Binomial counts: the bounds are many standard deviations wide.
		within := func(name string, got uint64, lo, hi uint64) {
			if got < lo || got > hi {
				t.Errorf("%s = %d, want %d..%d", name, got, lo, hi)
			}
		}
		within("Lost", s.Lost, 800, 1200)            // mean 1000, sd 30
		within("Duplicated", s.Duplicated, 330, 570) // mean 450, sd 21
		within("Reordered", s.Reordered, 350, 600)   // mean ~473, sd 21
		if s.Sent != count || s.Delivered != s.Sent-s.Lost+s.Duplicated || uint64(len(tags)) != s.Delivered {
			t.Errorf("stats %+v, %d read: want Sent %d and Delivered = Sent - Lost + Duplicated = read", s, len(tags), count)
		}
		// What was received: the lost packets never, the duplicated ones
		// twice, the rest once; some out of order.
		seen := map[uint64]int{}
		inversions := 0
		for i, tag := range tags {
			seen[tag]++
			if i > 0 && tag < tags[i-1] {
				inversions++
			}
		}
		twice := 0
		for _, k := range seen {
			if k > 2 {
				t.Fatalf("a packet arrived %d times", k)
			}
			twice += k - 1
		}
		if uint64(count-len(seen)) != s.Lost || uint64(twice) != s.Duplicated {
			t.Errorf("%d distinct packets arrived, %d twice; stats say %d lost, %d duplicated", len(seen), twice, s.Lost, s.Duplicated)
		}
		within("inversions", uint64(inversions), 100, 1000)
	})
}

func TestMemDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const delay = 10 * time.Millisecond
		n := New(Config{Delay: delay})
		defer n.Close()
		a := memOpen(t, n, hostA, 0)
		b := memOpen(t, n, hostB, 0)
		start := time.Now()
		writeAll(t, a, hostB, 0, testPacket(a.Port(), b.Port(), 64, 1))
		time.Sleep(delay - time.Nanosecond)
		if got := drain(t, b); len(got) != 0 {
			t.Fatalf("packet arrived before its delay")
		}
		readN(t, b, 1)
		if el := time.Since(start); el != delay {
			t.Errorf("packet took %v of fake time, want %v", el, delay)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		const delay, jitter = 10 * time.Millisecond, 5 * time.Millisecond
		n := New(Config{Seed: 3, Delay: delay, Jitter: jitter})
		defer n.Close()
		a := memOpen(t, n, hostA, 0)
		b := memOpen(t, n, hostB, 0)
		var lo, hi time.Duration = time.Hour, 0
		for i := range 200 {
			start := time.Now()
			writeAll(t, a, hostB, 0, testPacket(a.Port(), b.Port(), 64, uint64(i)))
			readN(t, b, 1)
			el := time.Since(start)
			lo, hi = min(lo, el), max(hi, el)
		}
		if lo < delay || hi > delay+jitter || hi-lo < jitter/2 {
			t.Errorf("delays spread over [%v, %v], want within [%v, %v] and spread", lo, hi, delay, delay+jitter)
		}
	})
}

func TestMemReorderHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(Config{Reorder: 1})
		defer n.Close()
		a := memOpen(t, n, hostA, 0)
		b := memOpen(t, n, hostB, 0)
		start := time.Now()
		writeAll(t, a, hostB, 0, testPacket(a.Port(), b.Port(), 64, 1))
		readN(t, b, 1) // nothing overtakes it: it waits the hold time
		if el := time.Since(start); el != ReorderHold {
			t.Errorf("lone reordered packet took %v, want %v", el, ReorderHold)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		// Packet 1 is held; packet 2 is not and releases it.
		n := New(Config{Seed: 1, Reorder: 0.5})
		defer n.Close()
		a := memOpen(t, n, hostA, 0)
		b := memOpen(t, n, hostB, 0)
		for i := range 100 {
			writeAll(t, a, hostB, 0, testPacket(a.Port(), b.Port(), 64, uint64(i)))
		}
		got := drain(t, b)
		time.Sleep(ReorderHold)
		synctest.Wait() // the timer's delivery, due now, has run
		got = append(got, drain(t, b)...)
		if len(got) != 100 || slices.IsSorted(got) {
			t.Fatalf("got %d packets, sorted %v: want 100 with some overtaken", len(got), slices.IsSorted(got))
		}
	})
}

func TestMemDropHook(t *testing.T) {
	var calls int
	n := New(Config{Drop: func(src, dst netip.Addr, pkt []byte) bool {
		calls++
		if src != hostA || dst != hostB {
			panic("wrong addresses")
		}
		return tagOf(pkt)%3 == 0
	}})
	defer n.Close()
	a := memOpen(t, n, hostA, 0)
	b := memOpen(t, n, hostB, 0)
	for i := range 9 {
		writeAll(t, a, hostB, 0, testPacket(a.Port(), b.Port(), 64, uint64(i)))
	}
	got := drain(t, b)
	if want := []uint64{1, 2, 4, 5, 7, 8}; !slices.Equal(got, want) || calls != 9 {
		t.Errorf("got %v after %d calls, want %v after 9", got, calls, want)
	}
	if s := n.Stats(); s.DroppedHook != 3 || s.Sent != 9 || s.Delivered != 6 {
		t.Errorf("stats %+v", s)
	}
}

func TestMemDrops(t *testing.T) {
	n := New(Config{QueueLen: 4})
	defer n.Close()
	a := memOpen(t, n, hostA, 0)
	b := memOpen(t, n, hostB, 0)
	for i := range 10 {
		writeAll(t, a, hostB, 0, testPacket(a.Port(), b.Port(), 64, uint64(i)))
	}
	writeAll(t, a, hostB, 0, testPacket(a.Port(), b.Port()+1, 64, 99)) // nobody there
	writeAll(t, a, hostA, 0, testPacket(a.Port(), 5, 64, 99))          // nobody there either
	if got := drain(t, b); !slices.Equal(got, []uint64{0, 1, 2, 3}) {
		t.Errorf("got %v, want the first 4", got)
	}
	if s := n.Stats(); s.DroppedQueueFull != 6 || s.DroppedNoListener != 2 || s.Delivered != 4 {
		t.Errorf("stats %+v", s)
	}
}

func TestMemCloseUnblocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(Config{Delay: time.Second})
		a := memOpen(t, n, hostA, 0)
		b := memOpen(t, n, hostB, 0)
		// A packet in flight keeps the timer armed; closing the last
		// Conn must stop it, or the bubble would not end.
		writeAll(t, a, hostB, 0, testPacket(a.Port(), b.Port(), 64, 1))
		errc := make(chan error, 1)
		go func() {
			_, err := b.ReadBatch(makePackets(1, 2048))
			errc <- err
		}()
		synctest.Wait() // the reader is parked
		b.Close()
		if err := <-errc; !errors.Is(err, net.ErrClosed) {
			t.Fatalf("ReadBatch after Close = %v, want net.ErrClosed", err)
		}
		if err := b.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if _, err := b.ReadBatch(makePackets(1, 64)); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("ReadBatch on a closed netio.Conn = %v", err)
		}
		if _, err := b.WriteBatch([]netio.Packet{{Buf: make([]byte, 64), N: 64, Addr: hostA}}); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("WriteBatch on a closed netio.Conn = %v", err)
		}
		a.Close()
		if s := n.Stats(); s.DroppedNoListener != 1 {
			t.Errorf("in-flight packet at last Close: stats %+v", s)
		}
		n.mu.Lock()
		if len(n.flight) != 0 || n.timer.Stop() {
			t.Errorf("after the last Close: %d packets in flight, timer still armed", len(n.flight))
		}
		n.mu.Unlock()
	})
	synctest.Test(t, func(t *testing.T) {
		n := New(Config{})
		checkCloseUnblocks(t, memOpen(t, n, hostA, 0), synctest.Wait)
	})
}

// TestMemConcurrent exercises the locking under the race detector,
// without links, with downlinks, and with uplinks too.
func TestMemConcurrent(t *testing.T) {
	faults := Config{Seed: 9, Loss: 0.01, Duplicate: 0.01, Reorder: 0.05, Delay: time.Microsecond, Jitter: time.Microsecond}
	links := faults
	links.LinkMbps, links.HostLinkMbps, links.LinkBufferBytes = 1000, map[netip.Addr]int{hostA: 100}, 64<<10
	uplinks := links
	uplinks.UplinkMbps, uplinks.HostUplinkMbps = 1000, map[netip.Addr]int{hostB: 200}
	for _, cfg := range []Config{faults, links, uplinks} {
		synctest.Test(t, func(t *testing.T) { memConcurrent(t, cfg) })
	}
}

// memConcurrent has four clients send to an echo server at once and
// checks that most echoes come back. It must run in a synctest bubble.
func memConcurrent(t *testing.T, cfg Config) {
	n := New(cfg)
	defer n.Close()
	srv := memOpen(t, n, hostB, 1)
	done := make(chan struct{})
	go func() { // echo server
		defer close(done)
		pkts := makePackets(8, 2048)
		for {
			k, err := srv.ReadBatch(pkts)
			if err != nil {
				return
			}
			for i := range pkts[:k] {
				b := pkts[i].Buf // swap the ports
				b[0], b[1], b[2], b[3] = b[2], b[3], b[0], b[1]
			}
			srv.WriteBatch(pkts[:k])
		}
	}()
	const clients, each = 4, 200
	results := make(chan int, clients)
	for range clients {
		c := memOpen(t, n, hostA, 0)
		go func() {
			defer c.Close()
			pkts := makePackets(8, 2048)
			got := 0
			poll := func() {
				for {
					k, err := c.(netio.Poller).TryReadBatch(pkts)
					if err != nil || k == 0 {
						return
					}
					got += k
				}
			}
			for j := range each {
				out := testPacket(c.Port(), 1, 64, uint64(j))
				if _, err := c.WriteBatch([]netio.Packet{{Buf: out, N: len(out), Addr: hostB}}); err != nil {
					t.Error(err)
				}
				poll()
			}
			time.Sleep(time.Second)
			poll()
			results <- got
		}()
	}
	total := 0
	for range clients {
		total += <-results
	}
	srv.Close()
	<-done
	if total < clients*each*9/10 {
		t.Errorf("only %d of %d echoes came back", total, clients*each)
	}
}
