//go:build linux

package netio

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// filterVM loads a socket filter into an interpreter.
func filterVM(t *testing.T, f []unix.SockFilter) *bpf.VM {
	t.Helper()
	raw := make([]bpf.RawInstruction, len(f))
	for i, s := range f {
		raw[i] = bpf.RawInstruction{Op: s.Code, Jt: s.Jt, Jf: s.Jf, K: s.K}
	}
	prog, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("filter does not disassemble")
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatalf("filter rejected: %v", err)
	}
	return vm
}

// runFilter runs vm on pkt as the kernel would and reports whether it
// keeps it.
func runFilter(t *testing.T, vm *bpf.VM, pkt []byte) bool {
	t.Helper()
	n, err := vm.Run(pkt)
	if err != nil {
		t.Fatalf("filter run: %v", err)
	}
	return n > 0
}

// TestPortSetFilter runs port-set filters of many sizes, in both
// families' framing (IPv4 with and without IP options), on every port of
// the set, on the ports around each, on random ports and on packets too
// short for a Homa header: exactly the set's ports pass.
func TestPortSetFilter(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{0, 1, 2, portLeaf, portLeaf + 1, 100, 1000, maxShareMembers} {
		set := map[uint16]bool{}
		var ports []uint16
		for len(ports) < size {
			p := uint16(1 + rng.IntN(MaxPort))
			if !set[p] {
				set[p] = true
				ports = append(ports, p)
			}
		}
		for _, v6 := range []bool{false, true} {
			sf, err := portSetFilter(v6, ports)
			if err != nil {
				t.Fatalf("%d ports: %v", size, err)
			}
			if len(sf) > maxFilterInsns {
				t.Fatalf("%d ports: %d instructions", size, len(sf))
			}
			raw := filterVM(t, sf)
			if size == maxShareMembers {
				kernelAccepts(t, sf)
			}
			probe := slices.Clone(ports)
			for _, p := range ports {
				probe = append(probe, p-1, p+1)
			}
			for range 200 {
				probe = append(probe, uint16(rng.IntN(MaxPort+1)))
			}
			for _, ihl := range ipHeaderLens(v6) {
				for _, p := range probe {
					pkt := framed(ihl, testPacket(7, p, homaHeaderLen, 1))
					if got := runFilter(t, raw, pkt); got != set[p] {
						t.Fatalf("%d ports, v6 %v, IP header %d: port %d kept %v, want %v", size, v6, ihl, p, got, set[p])
					}
				}
				if size > 0 {
					short := framed(ihl, testPacket(7, ports[0], homaHeaderLen-1, 1))
					if runFilter(t, raw, short) {
						t.Fatalf("%d ports: a packet shorter than the Homa header passed", size)
					}
				}
			}
		}
	}
	all := make([]uint16, MaxPort)
	for i := range all {
		all[i] = uint16(i + 1)
	}
	if _, err := portSetFilter(false, all); err == nil {
		t.Error("a filter for every port assembled, beyond the kernel's limit")
	}
}

// kernelAccepts attaches f to a socket: the kernel checks its length
// and jumps.
func kernelAccepts(t *testing.T, f []unix.SockFilter) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	if err := attachFilter(fds[0], f); err != nil {
		t.Fatalf("a filter of %d instructions: %v", len(f), err)
	}
}

// ipHeaderLens are the IP header lengths a family's filter sees before
// the Homa header: none for IPv6 (the kernel starts there), 20 or, with
// options, 24 for IPv4.
func ipHeaderLens(v6 bool) []int {
	if v6 {
		return []int{0}
	}
	return []int{20, 24}
}

// framed puts an IPv4 header of ihl bytes (none for 0) before pkt.
func framed(ihl int, pkt []byte) []byte {
	if ihl == 0 {
		return pkt
	}
	b := make([]byte, ihl, ihl+len(pkt))
	b[0] = 0x40 | byte(ihl/4)
	binary.BigEndian.PutUint16(b[2:], uint16(ihl+len(pkt)))
	b[9] = ipProtoHoma
	return append(b, pkt...)
}

// ownSockets makes OpenRaw give n client Conns a socket of their own
// for the rest of the test.
func ownSockets(t *testing.T, n int) {
	old := ownClientSockets
	ownClientSockets = n
	t.Cleanup(func() { ownClientSockets = old })
}

// TestRawShare opens client Conns beyond ownClientSockets and sends each
// of them, and one with a socket of its own, packets tagged with their
// port: every Conn reads exactly its own, through whichever read method,
// the members say they share, and when the last member closes the
// shared socket closes.
func TestRawShare(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			ownSockets(t, 1)
			before := RawShareStats()
			own := openRaw(t, fam.lo, 0, nil)
			if own.(StatsConn).Stats().Shared {
				t.Fatal("the first client Conn shares a socket")
			}
			var members []Conn
			for range 3 {
				c := openRaw(t, fam.lo, 0, nil)
				if !c.(StatsConn).Stats().Shared {
					t.Fatal("a client Conn beyond ownClientSockets has a socket of its own")
				}
				members = append(members, c)
			}
			if s := RawShareStats(); s.Sockets != before.Sockets+1 || s.Members != before.Members+3 {
				t.Fatalf("share stats %+v, from %+v: want one more socket and three more members", s, before)
			}
			sender := openRawPort(t, fam.lo)
			all := append([]Conn{own}, members...)
			const perConn = 5
			for round := range perConn {
				for _, c := range all {
					writeAll(t, sender, fam.lo, 0, testPacket(sender.Port(), c.Port(), 100, uint64(c.Port())<<8|uint64(round)))
				}
			}
			readers := []func(Conn, []Packet) (int, error){
				Conn.ReadBatch,
				func(c Conn, p []Packet) (int, error) { return c.(BorrowReader).ReadBorrowed(p) },
				func(c Conn, p []Packet) (int, error) {
					if err := c.(Poller).WaitReadable(); err != nil {
						return 0, err
					}
					return c.(Poller).TryReadBatch(p)
				},
			}
			for i, c := range all {
				read := readers[i%len(readers)]
				var tags []uint64
				pkts := makePackets(2, 2048)
				for len(tags) < perConn {
					n, err := read(c, pkts)
					if err != nil {
						t.Fatalf("Conn %d: read: %v", i, err)
					}
					for _, p := range pkts[:n] {
						if p.Addr != fam.lo || dstPort(p.Bytes()) != c.Port() {
							t.Fatalf("Conn %d (port %d) read a packet to port %d from %v", i, c.Port(), dstPort(p.Bytes()), p.Addr)
						}
						tags = append(tags, tagOf(p.Bytes()))
					}
				}
				for r, tag := range tags {
					if tag != uint64(c.Port())<<8|uint64(r) {
						t.Fatalf("Conn %d: packet %d has tag %#x", i, r, tag)
					}
				}
				expectNothingShared(t, c)
				if s := c.(StatsConn).Stats(); s.Read != perConn || s.Discarded != 0 || s.QueueDrops != 0 {
					t.Errorf("Conn %d stats %+v, want %d read and no drops", i, s, perConn)
				}
			}
			// The shared socket's filter kept out the packets to the
			// Conn with a socket of its own: no read of a member found
			// one there.
			if s := RawShareStats(); s.NoMember != before.NoMember {
				t.Errorf("the shared socket received %d packets for no member", s.NoMember-before.NoMember)
			}
			sh := members[0].(*sharedConn).share
			for _, c := range members {
				c.Close()
			}
			if !sh.conn.closed.Load() {
				t.Fatal("the shared socket is open after its last member closed")
			}
			if s := RawShareStats(); s.Sockets != before.Sockets || s.Members != before.Members {
				t.Fatalf("share stats %+v after the members closed, want those before, %+v", s, before)
			}
		})
	}
}

// openRawPort opens a raw Conn on an explicit port, which never shares.
func openRawPort(t *testing.T, laddr netip.Addr) Conn {
	c := openRandomPort(t, func(p uint16) (Conn, error) { return openRawErr(t, laddr, p) })
	t.Cleanup(func() { c.Close() })
	return c
}

func openRawErr(t *testing.T, laddr netip.Addr, port uint16) (Conn, error) {
	c, err := OpenRaw(laddr, port, nil)
	if errors.Is(err, ErrPermission) {
		t.Skipf("raw sockets need CAP_NET_RAW: %v", err)
	}
	return c, err
}

// expectNothingShared fails if c reads a packet now.
func expectNothingShared(t *testing.T, c Conn) {
	t.Helper()
	if n, err := c.(Poller).TryReadBatch(makePackets(1, 2048)); n != 0 || err != nil {
		t.Fatalf("Conn on port %d read %d more packets, %v", c.Port(), n, err)
	}
}

// TestSharedCloseAndWake: Close ends a member's parked ReadBatch with
// net.ErrClosed, and Wake one with ErrWoken.
func TestSharedCloseAndWake(t *testing.T) {
	ownSockets(t, 0)
	c := openRaw(t, lo4, 0, nil)
	errc := make(chan error, 1)
	go func() {
		_, err := c.ReadBatch(makePackets(1, 2048))
		errc <- err
	}()
	c.(Waker).Wake()
	if err := <-errc; err != ErrWoken {
		t.Fatalf("ReadBatch after Wake = %v, want ErrWoken", err)
	}
	checkCloseUnblocks(t, c, func() {})
}

// TestSharedQueueBounds fills a member's queue directly: packets beyond
// memberQueuePackets, beyond memberQueueBytes of buffers, or beyond the
// share's shareQueueBytes, are dropped and counted by reason; what was queued reads back in order, a packet larger than
// the Buf offered discarded and counted.
func TestSharedQueueBounds(t *testing.T) {
	c := &sharedConn{share: &rawShare{}, port: 9, ready: make(chan struct{}, 1), closing: make(chan struct{})}
	before := registry.stats.queueFull.Load()
	big := testPacket(1, 9, 3000, 1000) // larger than the Bufs offered
	c.deliver(&Packet{Buf: big, N: len(big), Addr: lo4})
	for i := range memberQueuePackets + 4 {
		b := testPacket(1, 9, 100, uint64(i))
		c.deliver(&Packet{Buf: b, N: len(b), Addr: lo4})
	}
	if got := c.Stats().QueueDrops; got != 5 {
		t.Fatalf("%d small packets dropped, want 5", got)
	}
	pkts := makePackets(memberQueuePackets+5, 2048)
	if n := c.pop(pkts, false); n != memberQueuePackets-1 {
		t.Fatalf("popped %d, want %d", n, memberQueuePackets-1)
	}
	for i, p := range pkts[:memberQueuePackets-1] {
		if tagOf(p.Bytes()) != uint64(i) {
			t.Fatalf("packet %d has tag %d", i, tagOf(p.Bytes()))
		}
	}
	large := memberQueueBytes / (1 << 16)
	for i := range large + 3 {
		b := testPacket(1, 9, 9000, uint64(i))
		c.deliver(&Packet{Buf: b, N: len(b), Addr: lo4})
	}
	s := c.Stats()
	if s.QueueDrops != 8 || s.Discarded != 1 || s.Read != memberQueuePackets-1 {
		t.Fatalf("stats %+v: want 8 queue drops (5 small, 3 large), 1 discarded, %d read", s, memberQueuePackets-1)
	}
	if got := registry.stats.queueFull.Load() - before; got != 8 {
		t.Fatalf("ShareStats.QueueFull grew by %d, want 8", got)
	}
	if n := c.pop(makePackets(large+3, 9000), false); n != large {
		t.Fatalf("popped %d large packets, want %d", n, large)
	}
	if q := c.share.queued.Load(); q != 0 {
		t.Fatalf("%d bytes counted in the share's queues with all read", q)
	}
	// The share's bound: with the other members' queues holding all but
	// a small buffer's worth, one small packet fits and the next does not.
	c.share.queued.Store(shareQueueBytes - smallBuf)
	beforeShare := registry.stats.shareFull.Load()
	for i := range 2 {
		b := testPacket(1, 9, 100, uint64(i))
		c.deliver(&Packet{Buf: b, N: len(b), Addr: lo4})
	}
	if got := registry.stats.shareFull.Load() - beforeShare; got != 1 || c.Stats().QueueDrops != 9 {
		t.Fatalf("ShareStats.ShareFull grew by %d, QueueDrops %d: want 1 and 9", got, c.Stats().QueueDrops)
	}
	if n := c.pop(makePackets(2, 2048), false); n != 1 || c.share.queued.Load() != shareQueueBytes-smallBuf {
		t.Fatalf("popped %d, share holds %d bytes: want 1 and %d", n, c.share.queued.Load(), shareQueueBytes-smallBuf)
	}
	// Close gives the share back what the queue held, and a packet that
	// comes after it is dropped as one for no member.
	c.share.queued.Store(0)
	b := testPacket(1, 9, 100, 1)
	c.deliver(&Packet{Buf: b, N: len(b), Addr: lo4})
	c.leave = func() {}
	c.Close()
	noMember := registry.stats.noMember.Load()
	c.deliver(&Packet{Buf: b, N: len(b), Addr: lo4})
	if q := c.share.queued.Load(); q != 0 || registry.stats.noMember.Load() != noMember+1 {
		t.Fatalf("after Close the share holds %d bytes and NoMember grew by %d: want 0 and 1", q, registry.stats.noMember.Load()-noMember)
	}
}

// TestSharedParkedReaders has several members' readers parked at once,
// one of them on the socket and the others on their queues, while
// packets for all of them arrive in turn: each reader gets exactly its
// own, in order.
func TestSharedParkedReaders(t *testing.T) {
	ownSockets(t, 0)
	const members, rounds = 3, 50
	var conns []Conn
	for range members {
		conns = append(conns, openRaw(t, lo4, 0, nil))
	}
	sender := openRawPort(t, lo4)
	type result struct {
		port uint16
		tags []uint64
		err  error
	}
	results := make(chan result, members)
	for _, c := range conns {
		go func() {
			r := result{port: c.Port()}
			pkts := makePackets(1, 2048)
			for len(r.tags) < rounds && r.err == nil {
				var n int
				if n, r.err = c.ReadBatch(pkts); n == 1 {
					r.tags = append(r.tags, tagOf(pkts[0].Bytes()))
				}
			}
			results <- r
		}()
	}
	for round := range rounds {
		for _, c := range conns {
			writeAll(t, sender, lo4, 0, testPacket(sender.Port(), c.Port(), 100, uint64(c.Port())<<8|uint64(round)))
		}
	}
	for range members {
		select {
		case r := <-results:
			if r.err != nil {
				t.Fatalf("port %d: read: %v", r.port, r.err)
			}
			for i, tag := range r.tags {
				if tag != uint64(r.port)<<8|uint64(i) {
					t.Fatalf("port %d: packet %d has tag %#x", r.port, i, tag)
				}
			}
		case <-time.After(safetyTimeout):
			for _, c := range conns {
				c.Close()
			}
			t.Fatal("the readers did not get their packets (safety timeout)")
		}
	}
}

// TestShareCapacity: members beyond a share's capacity open another
// share, a place freed in a full one is taken again, and the last
// member of each closes its socket.
func TestShareCapacity(t *testing.T) {
	ownSockets(t, 0)
	old := shareCapacity
	shareCapacity = 2
	t.Cleanup(func() { shareCapacity = old })
	var conns []*sharedConn
	for range 5 {
		c, ok := openRaw(t, lo4, 0, nil).(*sharedConn)
		if !ok {
			t.Fatal("a client Conn has a socket of its own")
		}
		conns = append(conns, c)
	}
	shares := map[*rawShare]int{}
	for _, c := range conns {
		shares[c.share]++
	}
	if len(shares) != 3 || shares[conns[0].share] != 2 || shares[conns[2].share] != 2 || shares[conns[4].share] != 1 {
		t.Fatalf("5 members in shares of %v; want 2, 2, 1", shares)
	}
	conns[1].Close()
	c, ok := openRaw(t, lo4, 0, nil).(*sharedConn)
	if !ok || c.share != conns[0].share {
		t.Fatal("a new member did not take the place freed in the first share")
	}
	for _, c := range conns[2:4] {
		c.Close()
	}
	if !conns[2].share.conn.closed.Load() || conns[0].share.conn.closed.Load() {
		t.Fatal("a share closed with members, or stayed open without")
	}
}
