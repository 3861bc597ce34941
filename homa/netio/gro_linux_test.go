//go:build linux

package netio

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"slices"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// openGRO opens a UDP Conn with GRO and skips the test when the kernel
// has no GRO.
func openGRO(t *testing.T, laddr netip.Addr, opt *Options) Conn {
	t.Helper()
	c := openUDP(t, laddr, 0, opt)
	if !c.(StatsConn).Stats().GRO {
		t.Skip("the kernel has no UDP GRO")
	}
	return c
}

// gsoPackets writes count packets of size bytes from a to b (port) as
// one batch, and returns them whole.
func gsoPackets(t *testing.T, a Conn, port uint16, addr netip.Addr, count, size int, tag uint64) [][]byte {
	t.Helper()
	var whole [][]byte
	var pkts []Packet
	for i := range count {
		p := testPacket(a.Port(), port, size, tag+uint64(i))
		whole = append(whole, p)
		pkts = append(pkts, withPayload(p, 60, addr, 0))
	}
	if k, err := a.WriteBatch(pkts); k != len(pkts) || err != nil {
		t.Fatalf("WriteBatch = %d, %v", k, err)
	}
	return whole
}

// TestGROSplit sends 100 packets sized for MTU 1500 as GSO datagrams to
// a Conn with GRO, which gets each GSO datagram whole and splits it back
// into the packets, in order, for every kind of read.
func TestGROSplit(t *testing.T) {
	reads := map[string]func(t testing.TB, c Conn, n int) []received{
		"ReadBatch":       readN,
		"TryReadBatch":    tryReadN,
		"TryReadBorrowed": readBorrowedN,
		"ReadBorrowed": func(t testing.TB, c Conn, n int) []received {
			return readN(t, borrowing{c}, n)
		},
	}
	for _, fam := range families {
		for name, read := range reads {
			t.Run(fam.name+"/"+name, func(t *testing.T) {
				opt := &Options{MTU: 1500}
				a := openGSO(t, fam.lo, opt)
				b := openGRO(t, fam.lo, opt)
				whole := gsoPackets(t, a, b.Port(), fam.lo, 100, a.MaxPacket(fam.lo), 0x100)
				checkReceived(t, read(t, b, len(whole)), whole, fam.lo)
				sa, sb := a.(StatsConn).Stats(), b.(StatsConn).Stats()
				if sb.Read != 100 || sb.RecvDatagrams != sa.SendDatagrams || sb.RecvDatagrams >= 100 || sb.Discarded != 0 {
					t.Errorf("receiver stats %+v, want 100 packets in the %d datagrams sent", sb, sa.SendDatagrams)
				}
			})
		}
	}
}

// borrowing is a Conn whose ReadBatch is ReadBorrowed, copying nothing:
// the caller must use the packets before the next read.
type borrowing struct{ Conn }

func (b borrowing) ReadBatch(pkts []Packet) (int, error) {
	return b.Conn.(BorrowReader).ReadBorrowed(pkts)
}

// tryReadN is readN through TryReadBatch, polling.
func tryReadN(t testing.TB, c Conn, n int) []received {
	t.Helper()
	pkts := makePackets(5, 1<<16)
	var got []received
	for tries := 0; len(got) < n; tries++ {
		if tries > 1e6 {
			t.Fatalf("only %d of %d packets arrived", len(got), n)
		}
		k, err := c.(Poller).TryReadBatch(pkts[:min(len(pkts), n-len(got))])
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pkts[:k] {
			got = append(got, received{bytes.Clone(p.Bytes()), p.Addr, p.Unreachable})
		}
	}
	return got
}

// sendGSO sends payload from a plain UDP socket to port on loopback as
// one GSO datagram of segments of seg bytes, bypassing the checks of a
// Conn.
func sendGSO(t *testing.T, port uint16, seg int, payload []byte) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	oob := make([]byte, 0, 64)
	if seg > 0 {
		oob = appendGSO(oob, seg)
	}
	if err := unix.Sendmsg(fd, payload, oob, &unix.SockaddrInet4{Port: int(port), Addr: lo4.As4()}, 0); err != nil {
		t.Fatalf("sendmsg with gso_size %d: %v", seg, err)
	}
}

// TestGROBadSegments sends GSO datagrams with bad segments from a plain
// socket: a Conn with GRO returns the good packets of a datagram and
// discards and counts each bad one: too short, for another port; and a
// datagram cut into segments shorter than a Homa header, all at once.
func TestGROBadSegments(t *testing.T) {
	b := openGRO(t, lo4, nil)
	good1 := testPacket(1, b.Port(), 100, 0x11)
	other := testPacket(1, b.Port()+1, 100, 0x12)
	good2 := testPacket(1, b.Port(), 100, 0x13)
	short := testPacket(1, b.Port(), 10, 0)
	sendGSO(t, b.Port(), 100, slices.Concat(good1, other, good2, short))
	sendGSO(t, b.Port(), 20, testPacket(1, b.Port(), 200, 0x14)) // 10 segments of 20 bytes
	good3 := testPacket(1, b.Port(), 300, 0x15)
	sendGSO(t, b.Port(), 0, good3)
	checkReceived(t, readN(t, b, 3), [][]byte{good1, good2, good3}, lo4)
	if s := b.(StatsConn).Stats(); s.Discarded != 12 || s.Read != 3 || s.RecvDatagrams != 3 {
		t.Errorf("stats %+v, want 3 datagrams, 3 packets read, 12 discarded", s)
	}
}

// TestGROSmallBufs checks that ReadBatch with GRO discards (and counts)
// the packets larger than the Buf offered, as without GRO, and returns
// the others.
func TestGROSmallBufs(t *testing.T) {
	a := openGSO(t, lo4, nil)
	b := openGRO(t, lo4, nil)
	gsoPackets(t, a, b.Port(), lo4, 5, 1000, 0x20)
	small := gsoPackets(t, a, b.Port(), lo4, 1, 300, 0x30)
	pkts := makePackets(4, 500)
	var got []received
	for tries := 0; len(got) == 0; tries++ {
		k, err := b.(Poller).TryReadBatch(pkts)
		if err != nil || tries > 1e6 {
			t.Fatalf("TryReadBatch: %d, %v after %d tries", k, err, tries)
		}
		for _, p := range pkts[:k] {
			got = append(got, received{bytes.Clone(p.Bytes()), p.Addr, p.Unreachable})
		}
	}
	checkReceived(t, got, small, lo4)
	if s := b.(StatsConn).Stats(); s.Discarded != 5 || s.Read != 1 {
		t.Errorf("stats %+v, want 5 discarded, 1 read", s)
	}
}

// TestGROPoller checks GRO with the Poller and reports together: packets
// left in the receive area make WaitReadable return at once, although
// the socket is empty; TryReadBatch hands them out without a system
// call; a report queued meanwhile comes after them; and WaitReadable
// parks again once everything is read, until a packet comes.
func TestGROPoller(t *testing.T) {
	opt := &Options{MTU: 1500, ReportUnreachable: true}
	a := openGSO(t, lo4, opt)
	b := openGRO(t, lo4, opt)
	p := b.(Poller)
	whole := gsoPackets(t, a, b.Port(), lo4, 100, a.MaxPacket(lo4), 0x100)
	pkts := makePackets(4, 1<<16)
	if k, err := p.TryReadBatch(pkts); k != 4 || err != nil {
		t.Fatalf("TryReadBatch = %d, %v", k, err)
	}
	sc := b.(*sockConn)
	var queued bool
	sc.rc.Control(func(fd uintptr) { queued = peekReady(fd) })
	if queued {
		t.Fatal("datagrams left in the socket: the first read should have taken all three")
	}
	waitReturns(t, p, "with packets in the receive area")
	calls := sc.Stats().RecvCalls
	dead := closedUDPPort(t, lo4)
	writeAll(t, b, lo4, 0, testPacket(b.Port(), dead, 100, 0xdead))
	got := tryReadN(t, b, 96+1)
	checkReceived(t, got[:96], whole[4:], lo4)
	if r := got[96]; r.unreach != UnreachablePort || tagOf(r.data) != 0xdead {
		t.Fatalf("after the packets: %v tag %#x, want the report", r.unreach, tagOf(r.data))
	}
	if s := sc.Stats(); s.RecvCalls != calls || s.Reports != 1 {
		t.Errorf("stats %+v: want no recvmmsg for the packets of the area (%d before), 1 report", s, calls)
	}
	woke := make(chan error, 1)
	go func() { woke <- p.WaitReadable() }()
	writeAll(t, a, lo4, 0, testPacket(a.Port(), b.Port(), 100, 0x42))
	select {
	case err := <-woke:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(safetyTimeout):
		t.Fatal("WaitReadable did not return when a packet came")
	}
	if got := tryReadN(t, b, 1); tagOf(got[0].data) != 0x42 {
		t.Fatalf("read tag %#x, want 0x42", tagOf(got[0].data))
	}
	checkParks(t, b)
}

// waitReturns fails unless p.WaitReadable returns, without error.
func waitReturns(t *testing.T, p Poller, why string) {
	t.Helper()
	woke := make(chan error, 1)
	go func() { woke <- p.WaitReadable() }()
	select {
	case err := <-woke:
		if err != nil {
			t.Fatalf("WaitReadable %s: %v", why, err)
		}
	case <-time.After(safetyTimeout):
		t.Fatalf("WaitReadable parked %s", why)
	}
}

// TestBorrowThenCopy checks a borrowed read followed by copying ones: the
// packets left in the area come next, copied into the caller's Bufs.
func TestBorrowThenCopy(t *testing.T) {
	opt := &Options{MTU: 1500}
	a := openGSO(t, lo4, opt)
	b := openGRO(t, lo4, opt)
	whole := gsoPackets(t, a, b.Port(), lo4, 50, a.MaxPacket(lo4), 0x300)
	got := readBorrowedN(t, b, 3)
	got = append(got, readN(t, b, 47)...)
	checkReceived(t, got, whole, lo4)
}

// TestBorrowRaw checks borrowed reads on raw Conns, whose IPv4 packets
// come with an IP header that is sliced off (options included).
func TestBorrowRaw(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			a, b := openRaw(t, fam.lo, 0, nil), openRaw(t, fam.lo, 0, nil)
			whole, pkts := payloadBatch(a.Port(), b.Port(), fam.lo, a.MaxPacket(fam.lo), 0x400)
			if k, err := a.WriteBatch(pkts); k != len(pkts) || err != nil {
				t.Fatalf("WriteBatch = %d, %v", k, err)
			}
			checkReceived(t, readBorrowedN(t, b, len(whole)), whole, fam.lo)
		})
	}
	t.Run("ipv4 options", func(t *testing.T) {
		b := openRaw(t, lo4, 0, nil)
		pkt := sendWithIPOptions(t, b.Port())
		checkReceived(t, readBorrowedN(t, b, 1), [][]byte{pkt}, lo4)
	})
}

// TestParseGRO checks the UDP_GRO control message parser on what the
// kernel writes (an int) and on malformed input.
func TestParseGRO(t *testing.T) {
	msg := func(level, typ int32, data []byte) []byte {
		b := make([]byte, unix.CmsgSpace(len(data)))
		putCmsg(b, level, typ, len(data))
		copy(b[unix.CmsgLen(0):], data)
		return b
	}
	int32b := func(v uint32) []byte { b := make([]byte, 4); nativePut32(b, v); return b }
	for _, tc := range []struct {
		name string
		ctl  []byte
		want int
	}{
		{"none", nil, 0},
		{"int", msg(unix.IPPROTO_UDP, unix.UDP_GRO, int32b(1472)), 1472},
		{"u16", msg(unix.IPPROTO_UDP, unix.UDP_GRO, []byte{0xc0, 0x05}[:2]), int(nativeGet16([]byte{0xc0, 0x05}))},
		{"after another", slices.Concat(msg(unix.IPPROTO_IP, unix.IP_TOS, int32b(7)), msg(unix.IPPROTO_UDP, unix.UDP_GRO, int32b(1000))), 1000},
		{"other only", msg(unix.IPPROTO_IP, unix.IP_TOS, int32b(7)), 0},
		{"short data", msg(unix.IPPROTO_UDP, unix.UDP_GRO, []byte{1}), 0},
		{"truncated", msg(unix.IPPROTO_UDP, unix.UDP_GRO, int32b(1472))[:10], 0},
		{"length beyond", func() []byte { b := msg(unix.IPPROTO_UDP, unix.UDP_GRO, int32b(9)); b[0] = 200; return b }(), 0},
	} {
		if got := parseGRO(tc.ctl); got != tc.want {
			t.Errorf("%s: parseGRO = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// FuzzParseGRO holds parseGRO to a model on any bytes, and checks that
// a UDP_GRO message encoded after others gives its segment size back
// whatever follows it, and nothing when cut short. The segment size
// comes as bytes: the fuzzer moves integers only by small steps.
func FuzzParseGRO(f *testing.F) {
	f.Add([]byte{}, []byte{0xc0, 0x05, 0, 0}, uint8(0), []byte{7}, uint16(0))
	f.Add([]byte{}, []byte{0, 0, 0x10, 0}, uint8(1), []byte{7}, uint16(0))

	f.Add(appendGSO(make([]byte, 0, 32), 1472), []byte{1}, uint8(2), []byte{}, uint16(30))
	f.Fuzz(func(t *testing.T, ctl, segb []byte, before uint8, other []byte, cut uint16) {
		want := 0
		if data, ok := cmsgModel(ctl, func(level, typ int32) bool { return level == unix.IPPROTO_UDP && typ == unix.UDP_GRO }); ok {
			switch {
			case len(data) >= 4:
				want = int(binary.NativeEndian.Uint32(data))
			case len(data) >= 2:
				want = int(binary.NativeEndian.Uint16(data))
			}
		}
		if got := parseGRO(ctl); got != want {
			t.Fatalf("parseGRO(%x) = %d; the model finds %d", ctl, got, want)
		}
		data := make([]byte, 4)
		copy(data, segb)
		seg := binary.NativeEndian.Uint32(data)
		enc := append(fuzzPrefix(before, other), cmsg(unix.IPPROTO_UDP, unix.UDP_GRO, data)...)
		end := len(enc) - unix.CmsgSpace(4) + unix.CmsgLen(4) // the UDP_GRO message without its padding
		if got := parseGRO(append(enc, ctl...)); got != int(seg) {
			t.Fatalf("parseGRO of an encoded segment size %d = %d", seg, got)
		}
		if k := int(cut) % end; parseGRO(enc[:k]) != 0 {
			t.Fatalf("parseGRO of the first %d of %d bytes = %d, want 0", k, end, parseGRO(enc[:k]))
		}
	})
}

func nativePut32(b []byte, v uint32) { binary.NativeEndian.PutUint32(b, v) }
func nativeGet16(b []byte) uint16    { return binary.NativeEndian.Uint16(b) }

// areaConn is a sockConn whose receive area holds the given datagrams as
// a receive left them (no socket): slot i has bytes dgrams[i], message
// flags flags[i] and, with GRO, a UDP_GRO control message of segs[i]
// (none when 0).
func areaConn(udp, gro bool, port uint16, dgrams [][]byte, flags []int32, segs []int) *sockConn {
	c := &sockConn{port: port}
	c.setup(false, udp, &Options{})
	c.gro = gro
	c.prepareArea(len(dgrams))
	r := &c.rd
	for i, d := range dgrams {
		copy(r.area.buf[i*areaSlotLen:], d)
		r.hs[i].len = uint32(len(d))
		r.hs[i].hdr.Flags = flags[i]
		ctl := r.area.ctl[i][:0]
		if segs[i] > 0 {
			ctl = ctl[:unix.CmsgSpace(4)]
			putCmsg(ctl, unix.IPPROTO_UDP, unix.UDP_GRO, 4)
			nativePut32(ctl[unix.CmsgLen(0):], uint32(segs[i]))
		}
		r.hs[i].hdr.SetControllen(len(ctl))
		(*unix.RawSockaddrInet4)(unsafe.Pointer(&r.names[i])).Addr = [4]byte{10, 0, 0, byte(i)}
	}
	r.done = len(dgrams)
	c.landed()
	return c
}

// TestHandOut checks how packets are cut from the datagrams in the
// receive area, one read at a time of 3 packets: at the GRO segment
// size, with the bad ones discarded and counted: a datagram truncated,
// or whose control message was (its segment size may be lost); a packet
// too short or for another port; a datagram of segments shorter than a
// Homa header, all at once; and, for raw IPv4, the IP header sliced off,
// a bad one discarded.
func TestHandOut(t *testing.T) {
	const port = 5000
	pk := func(size int, tag uint64) []byte { return testPacket(1, port, size, tag) }
	ipv4 := func(ihl int, pkt []byte) []byte {
		h := make([]byte, ihl)
		h[0] = 0x40 | byte(ihl/4)
		return append(h, pkt...)
	}
	for _, tc := range []struct {
		name      string
		udp, gro  bool
		dgrams    [][]byte
		flags     []int32
		segs      []int
		want      []uint64 // tags, in order
		discarded uint64
	}{
		{"GRO", true, true,
			[][]byte{slices.Concat(pk(100, 1), pk(100, 2), pk(100, 3), pk(100, 4), pk(40, 5)), pk(300, 6)},
			[]int32{0, 0}, []int{100, 0}, []uint64{1, 2, 3, 4, 5, 6}, 0},
		{"bad segments", true, true,
			[][]byte{slices.Concat(pk(100, 1), testPacket(1, port+1, 100, 2), pk(100, 3), pk(20, 4)), pk(200, 5), pk(300, 6)},
			[]int32{0, 0, 0}, []int{100, 20, 0}, []uint64{1, 3, 6}, 2 + 10},
		{"truncated", true, true,
			[][]byte{slices.Concat(pk(100, 1), pk(100, 2)), slices.Concat(pk(100, 3), pk(100, 4)), pk(100, 5)},
			[]int32{unix.MSG_TRUNC, unix.MSG_CTRUNC, 0}, []int{100, 100, 0}, []uint64{5}, 2},
		{"no GRO", true, false,
			[][]byte{slices.Concat(pk(100, 1), pk(100, 2)), pk(27, 3), pk(28, 4)},
			[]int32{0, 0, 0}, []int{100, 0, 0}, []uint64{1, 4}, 1},
		{"raw IPv4", false, false,
			[][]byte{ipv4(20, pk(100, 1)), ipv4(24, pk(100, 2)), ipv4(16, pk(100, 3)), ipv4(60, pk(100, 4))[:50], pk(100, 5)[:10]},
			[]int32{0, 0, 0, 0, 0}, []int{0, 0, 0, 0, 0}, []uint64{1, 2}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, borrow := range []bool{false, true} {
				c := areaConn(tc.udp, tc.gro, port, tc.dgrams, tc.flags, tc.segs)
				var got []uint64
				pkts := makePackets(3, 2048)
				for range 10 {
					k := c.handOut(pkts, borrow)
					for _, p := range pkts[:k] {
						if a := p.Addr.As4(); !p.Addr.Is4() || a[0] != 10 || int(a[3]) >= len(tc.dgrams) {
							t.Fatalf("packet from %v, want its slot's address", p.Addr)
						}
						got = append(got, tagOf(p.Bytes()))
					}
				}
				if !slices.Equal(got, tc.want) || c.rd.area.pending.Load() {
					t.Errorf("borrow %v: tags %v, want %v (pending %v)", borrow, got, tc.want, c.rd.area.pending.Load())
				}
				if s := c.Stats(); s.Discarded != tc.discarded || s.Read != uint64(len(tc.want)) {
					t.Errorf("borrow %v: %d discarded, %d read; want %d, %d", borrow, s.Discarded, s.Read, tc.discarded, len(tc.want))
				}
			}
		})
	}
}

// FuzzHandOut feeds arbitrary datagrams, segment sizes and flags to the
// receive area: every packet returned is a whole one for the Conn's
// port, inside its datagram, and the area empties.
func FuzzHandOut(f *testing.F) {
	f.Add(true, slices.Concat(testPacket(1, 5000, 100, 1), testPacket(1, 5000, 50, 2)), 100, int32(0), 3)
	f.Add(false, append([]byte{0x45}, make([]byte, 60)...), 0, int32(0), 1)
	f.Fuzz(func(t *testing.T, udp bool, dgram []byte, seg int, flags int32, batch int) {
		if len(dgram) > areaSlotLen {
			return
		}
		batch = 1 + min(max(batch, 0), 64)
		c := areaConn(udp, udp, 5000, [][]byte{dgram}, []int32{flags}, []int{max(seg, 0) % (1 << 17)})
		pkts := make([]Packet, batch)
		total := 0
		for range len(dgram) + 1 {
			k := c.handOut(pkts, true)
			for _, p := range pkts[:k] {
				if p.N < homaHeaderLen || len(p.Buf) != p.N || dstPort(p.Buf) != 5000 {
					t.Fatalf("returned a packet of %d bytes for port %d", p.N, dstPort(p.Buf))
				}
				total += p.N
			}
		}
		if total > len(dgram) || c.rd.area.pending.Load() {
			t.Fatalf("returned %d bytes of a %d-byte datagram; pending %v", total, len(dgram), c.rd.area.pending.Load())
		}
	})
}
