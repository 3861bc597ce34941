//go:build linux

package netio

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/homa-go/homa/internal/tools/netns"
	"golang.org/x/sys/unix"
)

func openUDP(t testing.TB, laddr netip.Addr, port uint16, opt *Options) Conn {
	t.Helper()
	c, err := OpenUDP(laddr, port, opt)
	if laddr.Is6() && errors.Is(err, unix.EADDRNOTAVAIL) {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	if err != nil {
		t.Fatalf("OpenUDP(%v, %d): %v", laddr, port, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestUDPExchange echoes packets carrying 1, 1,400 and 60,000 bytes after
// the common header (and a bare header) between two UDP Conns.
func TestUDPExchange(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			a := openUDP(t, fam.lo, 0, nil)
			b := openUDP(t, fam.lo, 0, nil)
			if a.Port() == b.Port() || a.Port() < MinClientPort {
				t.Fatalf("client ports %d and %d", a.Port(), b.Port())
			}
			for i, size := range []int{homaHeaderLen, homaHeaderLen + 1, homaHeaderLen + 1400, homaHeaderLen + 60000} {
				req := testPacket(a.Port(), b.Port(), size, uint64(100+i))
				writeAll(t, a, fam.lo, 0, req)
				got := readN(t, b, 1)[0]
				if !bytes.Equal(got.data, req) || got.addr != fam.lo {
					t.Fatalf("size %d: B read %d bytes from %v, want the %d sent from %v", size, len(got.data), got.addr, len(req), fam.lo)
				}
				resp := testPacket(b.Port(), a.Port(), size, uint64(200+i))
				writeAll(t, b, got.addr, 5, resp)
				back := readN(t, a, 1)[0]
				if !bytes.Equal(back.data, resp) || back.addr != fam.lo {
					t.Fatalf("size %d: echo differs (%d bytes from %v)", size, len(back.data), back.addr)
				}
			}
		})
	}
}

// TestUDPPorts checks that the UDP ports are the Homa ports: a datagram
// from a Conn leaves from UDP port Conn.Port() and goes to the UDP port
// named in the packet; a plain UDP socket reaches the Conn at UDP port
// Conn.Port(). It also checks what the Conn discards.
func TestUDPPorts(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			c := openUDP(t, fam.lo, 0, nil)
			network := "udp4"
			if fam.lo.Is6() {
				network = "udp6"
			}
			plain, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.AddrPortFrom(fam.lo, 0)))
			if err != nil {
				t.Fatal(err)
			}
			defer plain.Close()
			plain.SetDeadline(time.Now().Add(safetyTimeout))
			pport := uint16(plain.LocalAddr().(*net.UDPAddr).Port)

			out := testPacket(c.Port(), pport, 100, 0x1)
			writeAll(t, c, fam.lo, 0, out)
			buf := make([]byte, 2048)
			n, from, err := plain.ReadFromUDPAddrPort(buf)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf[:n], out) || from.Port() != c.Port() {
				t.Fatalf("plain socket got %d bytes from UDP port %d, want %d bytes from %d", n, from.Port(), len(out), c.Port())
			}

			to := net.UDPAddrFromAddrPort(netip.AddrPortFrom(fam.lo, c.Port()))
			send := func(b []byte) {
				if _, err := plain.WriteToUDP(b, to); err != nil {
					t.Fatal(err)
				}
			}
			send([]byte{1})                               // shorter than a header
			send(testPacket(pport, c.Port()+1, 100, 0x2)) // names another port
			send(testPacket(pport, c.Port(), 3000, 0x3))  // larger than the Buf offered below
			send(testPacket(pport, c.Port(), 100, 0x4))   // good
			pkts := makePackets(4, 2048)
			var got []Packet
			for len(got) == 0 {
				k, err := c.ReadBatch(pkts)
				if err != nil {
					t.Fatal(err)
				}
				got = pkts[:k]
			}
			if len(got) != 1 || tagOf(got[0].Bytes()) != 0x4 || got[0].N != 100 {
				t.Fatalf("read %d packets, first %d bytes tag %#x; want the one good packet", len(got), got[0].N, tagOf(got[0].Bytes()))
			}
			if d := c.(StatsConn).Stats().Discarded; d != 3 {
				t.Errorf("Discarded = %d, want 3", d)
			}
		})
	}
}

func TestUDPPortInUse(t *testing.T) {
	a := openUDP(t, lo4, 0, nil)
	b := openUDP(t, lo4, 0, nil)
	if a.Port() == b.Port() {
		t.Fatalf("two client Conns share port %d", a.Port())
	}
	if _, err := OpenUDP(lo4, a.Port(), nil); !errors.Is(err, ErrPortInUse) {
		t.Fatalf("OpenUDP(taken %d) = %v, want ErrPortInUse", a.Port(), err)
	}
	c := openRandomPort(t, func(p uint16) (Conn, error) { return OpenUDP(lo4, p, nil) })
	port := c.Port()
	if _, err := OpenUDP(netip.IPv4Unspecified(), port, nil); !errors.Is(err, ErrPortInUse) {
		t.Fatalf("OpenUDP(0.0.0.0, taken %d) = %v, want ErrPortInUse", port, err)
	}
	c.Close()
	d := openUDP(t, lo4, port, nil) // Close released it
	if d.Port() != port {
		t.Fatalf("Port() = %d, want %d", d.Port(), port)
	}
}

// TestUDPDSCP checks the TOS / traffic class of datagrams a UDP Conn
// sends, as a plain socket with IP_RECVTOS / IPV6_RECVTCLASS sees them.
func TestUDPDSCP(t *testing.T) {
	for _, fam := range families {
		for _, mode := range []string{"cmsg", "setsockopt", "rejected"} {
			t.Run(fam.name+"/"+mode, func(t *testing.T) {
				v6 := fam.lo.Is6()
				a := openUDP(t, fam.lo, 0, nil)
				setTOSMode(a, mode)
				fd, port := tosReceiver(t, v6, fam.lo)
				tag := uint64(time.Now().UnixNano()) << 8
				prios := []uint8{0, 3, 7, 3}
				pkts := make([]Packet, len(prios))
				for i, p := range prios {
					pkts[i] = Packet{Buf: testPacket(a.Port(), port, 64, tag+uint64(i)), N: 64, Addr: fam.lo, Priority: p}
				}
				if n, err := a.WriteBatch(pkts); n != len(pkts) || err != nil {
					t.Fatalf("WriteBatch = %d, %v", n, err)
				}
				for i, p := range prios {
					if got, want := recvTOS(t, fd, v6, true, tag+uint64(i))[1], DefaultDSCP.TOS(p); got != want {
						t.Errorf("priority %d: TOS %#x, want %#x", p, got, want)
					}
				}
				if sc := a.(*sockConn); (mode == "cmsg") == sc.wr.noCmsg {
					t.Errorf("noCmsg = %v after sending in %s mode", sc.wr.noCmsg, mode)
				}
			})
		}
	}
}

// tosReceiver opens a UDP socket on laddr that reports the TOS / traffic
// class of what it receives, and returns it with its port.
func tosReceiver(t *testing.T, v6 bool, laddr netip.Addr) (int, uint16) {
	family, level, opt := unix.AF_INET, unix.IPPROTO_IP, unix.IP_RECVTOS
	var sa unix.Sockaddr
	if v6 {
		family, level, opt = unix.AF_INET6, unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS
		sa = &unix.SockaddrInet6{Addr: laddr.As16()}
	} else {
		sa = &unix.SockaddrInet4{Addr: laddr.As4()}
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.SetsockoptInt(fd, level, opt, 1); err != nil {
		t.Fatal(err)
	}
	tv := unix.NsecToTimeval(int64(safetyTimeout))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, sa); err != nil {
		t.Fatal(err)
	}
	name, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	switch a := name.(type) {
	case *unix.SockaddrInet4:
		return fd, uint16(a.Port)
	case *unix.SockaddrInet6:
		return fd, uint16(a.Port)
	}
	t.Fatalf("unexpected socket name %T", name)
	return 0, 0
}

func TestUDPMaxPacket(t *testing.T) {
	a := openUDP(t, lo4, 0, nil)
	if got, want := a.MaxPacket(lo4), maxIPv4Total-ipv4HeaderLen-udpHeaderLen; got != want {
		t.Errorf("IPv4 loopback MaxPacket = %d, want %d", got, want)
	}
	a6 := openUDP(t, lo6, 0, nil)
	if got, want := a6.MaxPacket(lo6), 65536-ipv6HeaderLen-udpHeaderLen; got != want {
		t.Errorf("IPv6 loopback MaxPacket = %d, want %d", got, want)
	}
	m := openUDP(t, lo6, 0, &Options{MTU: 1500})
	if got := m.MaxPacket(lo6); got != 1500-40-8 {
		t.Errorf("MaxPacket with MTU 1500 = %d, want %d", got, 1500-40-8)
	}
	// The largest packet really goes through.
	b := openUDP(t, lo4, 0, nil)
	big := testPacket(a.Port(), b.Port(), a.MaxPacket(lo4), 0x616)
	writeAll(t, a, lo4, 0, big)
	if got := readN(t, b, 1)[0]; !bytes.Equal(got.data, big) {
		t.Errorf("largest packet: read %d bytes, want %d", len(got.data), len(big))
	}
}

func TestUDPBadWrites(t *testing.T) {
	a := openUDP(t, lo4, 0, nil)
	for _, p := range []Packet{
		{Buf: []byte{1}, N: 1, Addr: lo4},                  // no destination port
		{Buf: make([]byte, 64), N: 64, Addr: lo6},          // wrong family
		{Buf: make([]byte, 64), N: 64, Addr: netip.Addr{}}, // no address
	} {
		if n, err := a.WriteBatch([]Packet{p}); n != 0 || err == nil {
			t.Errorf("WriteBatch(%d bytes to %v) = %d, %v; want an error", p.N, p.Addr, n, err)
		}
	}
}

func TestUDPCloseUnblocks(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			c := openUDP(t, fam.lo, 0, nil)
			checkCloseUnblocks(t, c, readerInside(c))
		})
	}
}

// TestSocketBuffers checks that the socket buffers were enlarged: to the
// full default with the privilege to exceed the sysctl limits.
func TestSocketBuffers(t *testing.T) {
	c := openUDP(t, lo4, 0, nil).(*sockConn)
	var rcv, snd int
	c.rc.Control(func(fd uintptr) {
		rcv, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
		snd, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
	})
	if !hasNetAdmin(t) {
		t.Skipf("skipping: without CAP_NET_ADMIN (SO_RCVBUFFORCE) the buffers, %d / %d, are capped by net.core.[rw]mem_max", rcv, snd)
	}
	// Linux reports twice the size set (it counts its overhead).
	if rcv < defaultSockBuffer || snd < defaultSockBuffer {
		t.Errorf("SO_RCVBUF %d, SO_SNDBUF %d; want at least %d", rcv, snd, defaultSockBuffer)
	}
}

// TestQueueDrops: a Conn that nobody reads, with a small receive buffer,
// overflows under a burst, and its Stats count the packets the kernel
// dropped for it; a Conn that keeps up counts none.
func TestQueueDrops(t *testing.T) {
	if !hasNetAdmin(t) {
		t.Skip("skipping: a receive buffer this small needs SO_RCVBUFFORCE (CAP_NET_ADMIN)")
	}
	small := openUDP(t, lo4, 0, &Options{ReadBuffer: 4096, DisableGRO: true}).(*sockConn)
	sender := openUDP(t, lo4, 0, nil)
	if d := small.Stats().QueueDrops; d != 0 {
		t.Fatalf("a fresh Conn reports %d drops", d)
	}
	const burst = 200
	pkt := testPacket(sender.Port(), small.Port(), homaHeaderLen+1000, 1)
	for range burst {
		if _, err := sender.WriteBatch([]Packet{{Buf: pkt, N: len(pkt), Addr: lo4}}); err != nil {
			t.Fatal(err)
		}
	}
	got := readN(t, small, 1) // at least one got in
	drops := small.Stats().QueueDrops
	t.Logf("%d packets sent, %d read first, %d dropped by the kernel", burst, len(got), drops)
	if drops == 0 || drops >= burst {
		t.Fatalf("%d of %d packets counted as dropped at a 4 KB receive buffer", drops, burst)
	}
}

// hasNetAdmin reports whether the process has CAP_NET_ADMIN, which
// SO_RCVBUFFORCE and SO_SNDBUFFORCE need.
func hasNetAdmin(t *testing.T) bool {
	t.Helper()
	has, err := netns.HasCapability(unix.CAP_NET_ADMIN)
	if err != nil {
		t.Fatal(err)
	}
	return has
}
