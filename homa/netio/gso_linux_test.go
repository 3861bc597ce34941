//go:build linux

package netio

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sizedPacket is a packet of size bytes from port 1000 to port dst at
// addr: a 60-byte header in Buf and the rest as Payload (or all in Buf
// when shorter).
func sizedPacket(size int, dst uint16, addr netip.Addr, prio uint8) Packet {
	b := testPacket(1000, dst, size, uint64(size))
	if size <= 60 {
		return Packet{Buf: b, N: size, Addr: addr, Priority: prio}
	}
	return withPayload(b, 60, addr, prio)
}

// repeat returns n copies of p.
func repeat(n int, p Packet) []Packet {
	pkts := make([]Packet, n)
	for i := range pkts {
		pkts[i] = p
	}
	return pkts
}

// cmsgs returns the control messages of a prepared message as (level,
// type) -> data.
func cmsgs(h *mmsghdr) map[[2]int32][]byte {
	m := map[[2]int32][]byte{}
	if h.hdr.Control == nil {
		return m
	}
	ctl := unsafe.Slice(h.hdr.Control, h.hdr.Controllen)
	for len(ctl) >= unix.SizeofCmsghdr {
		n, level, typ := cmsgHeader(ctl)
		m[[2]int32{level, typ}] = ctl[unix.SizeofCmsghdr:n]
		next := cmsgAlign(n)
		if next >= uint64(len(ctl)) {
			break
		}
		ctl = ctl[next:]
	}
	return m
}

// TestGSORuns checks which packets prepareWrite puts in one GSO datagram:
// runs to one address and port, with one TOS, of one size but for a
// shorter last, within the kernel's limits (64 segments, one datagram's
// bytes) and the batch's; each with a UDP_SEGMENT control message of the
// packet size next to the TOS message, single packets without it.
func TestGSORuns(t *testing.T) {
	const p1, p2 = 2000, 2001
	a1, a2 := lo4, netip.MustParseAddr("127.0.0.2")
	cat := func(runs ...[]Packet) []Packet { return slices.Concat(runs...) }
	sameTOS := DSCP{10, 10, 16, 24, 32, 40, 48, 56}
	for _, tc := range []struct {
		name    string
		pkts    []Packet
		noGSO   bool
		dscp    *DSCP
		batch   int
		want    []int // packets per message
		wantErr error
	}{
		{"1000-byte packets", repeat(100, sizedPacket(1000, p1, a1, 0)), false, nil, 0, []int{64, 36}, nil},
		{"MTU 1500", repeat(100, sizedPacket(1472, p1, a1, 0)), false, nil, 0, []int{44, 44, 12}, nil},
		{"a shorter one ends a run", cat(repeat(5, sizedPacket(1472, p1, a1, 0)), repeat(1, sizedPacket(700, p1, a1, 0)), repeat(3, sizedPacket(1472, p1, a1, 0))), false, nil, 0, []int{6, 3}, nil},
		{"a larger one starts a run", cat(repeat(1, sizedPacket(1000, p1, a1, 0)), repeat(2, sizedPacket(1472, p1, a1, 0))), false, nil, 0, []int{1, 2}, nil},
		{"priorities", cat(repeat(3, sizedPacket(1000, p1, a1, 0)), repeat(3, sizedPacket(1000, p1, a1, 7))), false, nil, 0, []int{3, 3}, nil},
		{"priorities of one TOS", cat(repeat(3, sizedPacket(1000, p1, a1, 0)), repeat(3, sizedPacket(1000, p1, a1, 1))), false, &sameTOS, 0, []int{6}, nil},
		{"ports", cat(repeat(3, sizedPacket(1000, p1, a1, 0)), repeat(3, sizedPacket(1000, p2, a1, 0))), false, nil, 0, []int{3, 3}, nil},
		{"addresses", cat(repeat(2, sizedPacket(1000, p1, a1, 0)), repeat(2, sizedPacket(1000, p1, a2, 0))), false, nil, 0, []int{2, 2}, nil},
		{"largest packets", repeat(3, sizedPacket(maxDatagram(false, true), p1, a1, 0)), false, nil, 0, []int{1, 1, 1}, nil},
		{"half a datagram", repeat(3, sizedPacket(maxDatagram(false, true)/2, p1, a1, 0)), false, nil, 0, []int{2, 1}, nil},
		{"small packets", repeat(5, sizedPacket(40, p1, a1, 0)), false, nil, 0, []int{5}, nil},
		{"GSO off", repeat(3, sizedPacket(1000, p1, a1, 0)), true, nil, 0, []int{1, 1, 1}, nil},
		{"bad packet", cat(repeat(3, sizedPacket(1000, p1, a1, 0)), []Packet{{Buf: make([]byte, 8), N: 2, Addr: a1}}), false, nil, 0, []int{3}, ErrBadPacket},
		{"bad address", cat(repeat(3, sizedPacket(1000, p1, a1, 0)), repeat(1, sizedPacket(1000, p1, lo6, 0))), false, nil, 0, []int{3}, ErrBadAddr},
		{"batch", cat(repeat(1, sizedPacket(100, p1, a1, 0)), repeat(1, sizedPacket(200, p1, a1, 0)), repeat(1, sizedPacket(300, p1, a1, 0)), repeat(2, sizedPacket(400, p1, a1, 0)), repeat(1, sizedPacket(500, p1, a1, 0))), false, nil, 4, []int{1, 1, 1, 2}, nil},
		{"iovecs", repeat(3000, sizedPacket(100, p1, a1, 0)), false, nil, 0, slices.Repeat([]int{64}, maxSendPackets/64), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &sockConn{}
			c.setup(false, true, &Options{DSCP: tc.dscp})
			c.wr.gso.Store(!tc.noGSO)
			if tc.batch > 0 {
				c.wr.batch = tc.batch
			}
			err := c.prepareWrite(tc.pkts)
			w := &c.wr
			if !errors.Is(err, tc.wantErr) || !slices.Equal(w.segs[:w.cnt], tc.want) {
				t.Fatalf("prepared runs %v, %v; want %v, %v", w.segs[:w.cnt], err, tc.want, tc.wantErr)
			}
			first := 0
			for m := range w.cnt {
				h := &w.hs[m]
				size := tc.pkts[first].Len()
				bytes := 0
				for _, v := range unsafe.Slice(h.hdr.Iov, h.hdr.Iovlen) {
					bytes += int(v.Len)
				}
				total := 0
				for _, p := range tc.pkts[first : first+w.segs[m]] {
					total += p.Len()
				}
				cm := cmsgs(h)
				gso, isGSO := cm[[2]int32{unix.IPPROTO_UDP, unix.UDP_SEGMENT}]
				tos := cm[[2]int32{unix.IPPROTO_IP, unix.IP_TOS}]
				switch {
				case bytes != total:
					t.Errorf("message %d: iovecs of %d bytes, want the %d of its packets", m, bytes, total)
				case isGSO != (w.segs[m] > 1):
					t.Errorf("message %d of %d packets: UDP_SEGMENT %v", m, w.segs[m], isGSO)
				case isGSO && int(binary.NativeEndian.Uint16(gso)) != size:
					t.Errorf("message %d: gso_size %d, want %d", m, binary.NativeEndian.Uint16(gso), size)
				case len(tos) == 0 || tos[0] != c.tos[tc.pkts[first].Priority]:
					t.Errorf("message %d: TOS message %v, want %#x", m, tos, c.tos[tc.pkts[first].Priority])
				}
				first += w.segs[m]
			}
			w.clear()
		})
	}
}

// openGSO opens a UDP Conn with the default options and skips the test
// when the kernel has no GSO.
func openGSO(t *testing.T, laddr netip.Addr, opt *Options) Conn {
	t.Helper()
	c := openUDP(t, laddr, 0, opt)
	if !c.(StatsConn).Stats().GSO {
		t.Skip("the kernel has no UDP GSO (UDP_SEGMENT)")
	}
	return c
}

// TestOffloadOptions checks the probes and the options that turn the
// offloads off.
func TestOffloadOptions(t *testing.T) {
	for _, tc := range []struct {
		name             string
		udp              bool
		opt              Options
		wantGSO, wantGRO bool
	}{
		{"udp", true, Options{}, true, true},
		{"no GSO", true, Options{DisableGSO: true}, false, true},
		{"no GRO", true, Options{DisableGRO: true}, true, false},
		{"raw", false, Options{}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c Conn
			if tc.udp {
				c = openUDP(t, lo4, 0, &tc.opt)
			} else {
				c = openRaw(t, lo4, 0, &tc.opt)
			}
			var gso, gro bool
			c.(*sockConn).rc.Control(func(fd uintptr) {
				gso = probeGSO(int(fd))
				v, err := unix.GetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO)
				gro = err == nil && v != 0
			})
			if tc.udp && tc.wantGSO && !gso {
				t.Skip("the kernel has no UDP GSO")
			}
			s := c.(StatsConn).Stats()
			if s.GSO != tc.wantGSO || s.GRO != tc.wantGRO || gro != tc.wantGRO {
				t.Errorf("GSO %v, GRO %v (socket option %v); want %v, %v", s.GSO, s.GRO, gro, tc.wantGSO, tc.wantGRO)
			}
		})
	}
}

// TestGSOSend sends 100 packets sized for MTU 1500 as GSO datagrams to a
// Conn without GRO, which gets them as 100 datagrams: 44 packets per GSO
// datagram, one sendmmsg for all.
func TestGSOSend(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			opt := &Options{MTU: 1500}
			a := openGSO(t, fam.lo, opt)
			b := openUDP(t, fam.lo, 0, &Options{MTU: 1500, DisableGRO: true})
			size := a.MaxPacket(fam.lo)
			var whole [][]byte
			var pkts []Packet
			for i := range 100 {
				b := testPacket(a.Port(), b.Port(), size, uint64(i))
				whole = append(whole, b)
				pkts = append(pkts, withPayload(b, 60, fam.lo, 3))
			}
			writeAll(t, a, fam.lo, 0, whole[:0]...) // nothing: no syscall
			if k, err := a.WriteBatch(pkts); k != len(pkts) || err != nil {
				t.Fatalf("WriteBatch = %d, %v", k, err)
			}
			checkReceived(t, readN(t, b, len(whole)), whole, fam.lo)
			per := maxDatagram(fam.lo.Is6(), true) / size
			want := uint64((100 + per - 1) / per)
			if s := a.(StatsConn).Stats(); s.SendCalls != 1 || s.SendDatagrams != want || s.Written != 100 {
				t.Errorf("sender stats %+v, want 1 call, %d datagrams, 100 packets", s, want)
			}
			if s := b.(StatsConn).Stats(); s.RecvDatagrams != 100 || s.Read != 100 {
				t.Errorf("receiver stats %+v, want 100 datagrams of a packet each", s)
			}
		})
	}
}

// TestGSODSCP checks that each packet of a GSO datagram carries the TOS
// of its priority, as a plain UDP socket (which gets them cut up) sees it.
func TestGSODSCP(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			v6 := fam.lo.Is6()
			a := openGSO(t, fam.lo, nil)
			fd, port := tosReceiver(t, v6, fam.lo)
			prios := []uint8{5, 5, 5, 5, 2, 2, 2, 7}
			var pkts []Packet
			for i, p := range prios {
				pkts = append(pkts, withPayload(testPacket(a.Port(), port, 500, uint64(0x500+i)), 60, fam.lo, p))
			}
			if k, err := a.WriteBatch(pkts); k != len(pkts) || err != nil {
				t.Fatalf("WriteBatch = %d, %v", k, err)
			}
			for i, p := range prios {
				if got, want := recvTOS(t, fd, v6, true, uint64(0x500+i))[1], DefaultDSCP.TOS(p); got != want {
					t.Errorf("packet %d, priority %d: TOS %#x, want %#x", i, p, got, want)
				}
			}
			if s := a.(StatsConn).Stats(); s.SendDatagrams != 3 {
				t.Errorf("%d datagrams, want 3 (one per priority)", s.SendDatagrams)
			}
		})
	}
}

// gsoBatch is a batch for fallback tests: one packet of 300 bytes, then
// 20 of 1000, from a to b.
func gsoBatch(a, b Conn, addr netip.Addr) ([][]byte, []Packet) {
	var whole [][]byte
	var pkts []Packet
	for i := range 21 {
		size := 1000
		if i == 0 {
			size = 300
		}
		p := testPacket(a.Port(), b.Port(), size, uint64(0x700+i))
		whole = append(whole, p)
		pkts = append(pkts, withPayload(p, 60, addr, 0))
	}
	return whole, pkts
}

// TestGSOFallback checks what a Conn does when the kernel refuses a GSO
// datagram: it sends its packets one per datagram, in order, each once,
// and stops using GSO. The kernel refuses GSO (EINVAL) on a socket that
// sends without UDP checksums (SO_NO_CHECK, UDP_NO_CHECK6_TX); EIO,
// which routes through IPsec give, is simulated.
func TestGSOFallback(t *testing.T) {
	for _, fam := range families {
		for _, how := range []string{"EINVAL", "EIO"} {
			t.Run(fam.name+"/"+how, func(t *testing.T) {
				a := openGSO(t, fam.lo, nil)
				b := openUDP(t, fam.lo, 0, nil)
				sc := a.(*sockConn)
				switch how {
				case "EINVAL":
					var err error
					level, opt := unix.SOL_SOCKET, unix.SO_NO_CHECK
					if fam.lo.Is6() {
						level, opt = unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_TX
					}
					sc.rc.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), level, opt, 1) })
					if fam.lo.Is6() && err == nil {
						// IPv6 receivers drop datagrams without a checksum unless told not to.
						b.(*sockConn).rc.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1) })
					}
					if errors.Is(err, unix.ENOPROTOOPT) {
						t.Skipf("the kernel has no option to send UDP without checksums: %v", err)
					}
					if err != nil {
						t.Fatal(err)
					}
				case "EIO":
					refuseGSO(sc, unix.EIO)
				}
				whole, pkts := gsoBatch(a, b, fam.lo)
				if k, err := a.WriteBatch(pkts); k != len(pkts) || err != nil {
					t.Fatalf("WriteBatch = %d, %v", k, err)
				}
				checkReceived(t, readN(t, b, len(whole)), whole, fam.lo)
				s := a.(StatsConn).Stats()
				if s.GSO || s.GSOFallbacks != 1 || s.Written != uint64(len(pkts)) || s.SendDatagrams != uint64(len(pkts)) {
					t.Errorf("stats %+v; want GSO off after 1 fallback, %d packets in as many datagrams", s, len(pkts))
				}
				// From now on, without GSO and without another refusal.
				if k, err := a.WriteBatch(pkts); k != len(pkts) || err != nil {
					t.Fatalf("second WriteBatch = %d, %v", k, err)
				}
				checkReceived(t, readN(t, b, len(whole)), whole, fam.lo)
				if s := a.(StatsConn).Stats(); s.GSOFallbacks != 1 || s.SendDatagrams != 2*uint64(len(pkts)) {
					t.Errorf("after a second batch: stats %+v", s)
				}
			})
		}
	}
}

// refuseGSO makes c's sends fail with e at the first GSO datagram, as the
// kernel does when it cannot segment: the messages before it go out.
func refuseGSO(c *sockConn, e unix.Errno) {
	w := &c.wr
	send := w.send
	w.send = func(fd uintptr) bool {
		cnt := w.cnt
		stop := w.done
		for stop < cnt && w.segs[stop] == 1 {
			stop++
		}
		w.cnt = stop
		more := send(fd)
		w.cnt = cnt
		if more && w.errno == 0 && w.done < cnt {
			w.errno = e
		}
		return more
	}
}

// TestGSOTOSRejected checks the ambiguous EINVAL: the kernel refuses a
// GSO datagram because of its TOS control message. The Conn takes GSO
// off, finds that single packets fail too, drops the TOS messages (the
// socket's TOS instead) and takes GSO back.
func TestGSOTOSRejected(t *testing.T) {
	a := openGSO(t, lo4, nil)
	b := openUDP(t, lo4, 0, nil)
	setTOSMode(a, "rejected")
	whole, pkts := gsoBatch(a, b, lo4)
	pkts = pkts[1:] // all 1000 bytes: the first message is a GSO one
	whole = whole[1:]
	if k, err := a.WriteBatch(pkts); k != len(pkts) || err != nil {
		t.Fatalf("WriteBatch = %d, %v", k, err)
	}
	checkReceived(t, readN(t, b, len(whole)), whole, lo4)
	sc := a.(*sockConn)
	s := sc.Stats()
	if !s.GSO || !sc.wr.noCmsg || s.GSOFallbacks != 1 || s.SendDatagrams != 1 {
		t.Errorf("stats %+v, noCmsg %v; want GSO back on, the TOS on the socket, the 20 packets in 1 datagram", s, sc.wr.noCmsg)
	}
}

// TestGSOReport sends a GSO run to a closed port: the receiving kernel
// answers the whole datagram with one ICMP error, which quotes its first
// packet.
func TestGSOReport(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			a := openGSO(t, fam.lo, reportOpts)
			b := openUDP(t, fam.lo, 0, nil)
			dead := closedUDPPort(t, fam.lo)
			var pkts []Packet
			for i := range 10 {
				pkts = append(pkts, withPayload(testPacket(a.Port(), dead, 1000, uint64(0x900+i)), 60, fam.lo, 0))
			}
			if k, err := a.WriteBatch(pkts); k != len(pkts) || err != nil {
				t.Fatalf("WriteBatch = %d, %v", k, err)
			}
			got := readN(t, a, 1)[0]
			if got.unreach != UnreachablePort || tagOf(got.data) != 0x900 || dstPort(got.data) != dead {
				t.Fatalf("read %v tag %#x for port %d, want a report of the first packet to %d", got.unreach, tagOf(got.data), dstPort(got.data), dead)
			}
			echo(t, a, b, fam.lo, 0x1000)
			expectNothing(t, a)
		})
	}
}
