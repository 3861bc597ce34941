//go:build linux

package netio

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// openRaw opens a raw Conn or skips the test when the process may not.
func openRaw(t testing.TB, laddr netip.Addr, port uint16, opt *Options) Conn {
	t.Helper()
	c, err := OpenRaw(laddr, port, opt)
	if errors.Is(err, ErrPermission) {
		t.Skipf("raw sockets need CAP_NET_RAW: %v", err)
	}
	if laddr.Is6() && errors.Is(err, unix.EADDRNOTAVAIL) {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	if err != nil {
		t.Fatalf("OpenRaw(%v, %d): %v", laddr, port, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var families = []struct {
	name string
	lo   netip.Addr
}{{"ipv4", lo4}, {"ipv6", lo6}}

func TestRawExchange(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			wild := netip.IPv4Unspecified()
			if fam.lo.Is6() {
				wild = netip.IPv6Unspecified()
			}
			a := openRaw(t, wild, 0, nil) // receives on every address
			b := openRaw(t, fam.lo, 0, nil)
			if a.Port() == b.Port() {
				t.Fatalf("two client Conns share port %d", a.Port())
			}
			for i, size := range []int{homaHeaderLen, 1400, 60000} {
				req := testPacket(a.Port(), b.Port(), size, uint64(100+i))
				writeAll(t, a, fam.lo, 0, req)
				got := readN(t, b, 1)[0]
				if !bytes.Equal(got.data, req) {
					t.Fatalf("size %d: B read %d bytes that differ from the %d sent", size, len(got.data), len(req))
				}
				if got.addr != fam.lo {
					t.Fatalf("size %d: source %v, want %v", size, got.addr, fam.lo)
				}
				resp := testPacket(b.Port(), a.Port(), size, uint64(200+i))
				writeAll(t, b, got.addr, 7, resp)
				back := readN(t, a, 1)[0]
				if !bytes.Equal(back.data, resp) || back.addr != fam.lo {
					t.Fatalf("size %d: echo differs (%d bytes from %v)", size, len(back.data), back.addr)
				}
			}
			if s := b.(StatsConn).Stats(); s.Read != 3 || s.Written != 3 || s.Discarded != 0 {
				t.Errorf("B stats = %+v, want 3 read, 3 written, 0 discarded", s)
			}
		})
	}
}

// readerInside returns a function that waits until a goroutine holds c's
// read lock, that is, is inside ReadBatch.
func readerInside(c Conn) func() {
	sc := c.(*sockConn)
	return func() {
		for sc.rd.mu.TryLock() {
			sc.rd.mu.Unlock()
			runtime.Gosched()
		}
	}
}

// TestRawFilter checks the kernel filter on both families: packets for
// port A never reach B's Conn and the other way round, and packets
// shorter than the common header reach no one.
func TestRawFilter(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			a := openRaw(t, fam.lo, 0, nil)
			b := openRaw(t, fam.lo, 0, nil)
			const k = 5
			for i := range k {
				writeAll(t, a, fam.lo, 0, testPacket(a.Port(), b.Port(), 100+i, uint64(0xb00+i)))
				writeAll(t, b, fam.lo, 0, testPacket(b.Port(), a.Port(), 100+i, uint64(0xa00+i)))
			}
			// Short packets to both, then one last valid packet each: on
			// loopback, anything misdelivered would be queued before it.
			writeAll(t, a, fam.lo, 0, testPacket(a.Port(), b.Port(), homaHeaderLen-1, 0), testPacket(a.Port(), a.Port(), 4, 0))
			writeAll(t, a, fam.lo, 0, testPacket(a.Port(), b.Port(), homaHeaderLen, 0xbff))
			writeAll(t, b, fam.lo, 0, testPacket(b.Port(), a.Port(), homaHeaderLen, 0xaff))
			for _, side := range []struct {
				c    Conn
				base uint64
			}{{a, 0xa00}, {b, 0xb00}} {
				got := readN(t, side.c, k+1)
				for i, r := range got {
					want := side.base + uint64(i)
					if i == k {
						want = side.base + 0xff
					}
					if dstPort(r.data) != side.c.Port() || tagOf(r.data) != want {
						t.Errorf("port %d packet %d: dst port %d tag %#x, want tag %#x", side.c.Port(), i, dstPort(r.data), tagOf(r.data), want)
					}
				}
				expectNothing(t, side.c)
				// Foreign and short packets must be stopped by the kernel
				// filter, not by ReadBatch's own check.
				if d := side.c.(StatsConn).Stats().Discarded; d != 0 {
					t.Errorf("port %d: the kernel passed %d packets that ReadBatch discarded", side.c.Port(), d)
				}
			}
		})
	}
}

// TestRawBoundAddress checks that a Conn bound to 127.0.0.1 does not get
// packets for its port sent to another loopback address, 127.0.0.2.
func TestRawBoundAddress(t *testing.T) {
	a := openRaw(t, netip.IPv4Unspecified(), 0, nil)
	b := openRaw(t, lo4, 0, nil)
	writeAll(t, a, netip.MustParseAddr("127.0.0.2"), 0, testPacket(a.Port(), b.Port(), 64, 2))
	writeAll(t, a, lo4, 0, testPacket(a.Port(), b.Port(), 64, 1))
	if got := readN(t, b, 1)[0]; tagOf(got.data) != 1 {
		t.Fatalf("Conn bound to %v read a packet for 127.0.0.2", lo4)
	}
	expectNothing(t, b)
}

// TestRawIPOptions sends from a socket that adds IPv4 options, so the
// received IP header is longer than 20 bytes and must still be stripped.
func TestRawIPOptions(t *testing.T) {
	b := openRaw(t, lo4, 0, nil)
	pkt := sendWithIPOptions(t, b.Port())
	got := readN(t, b, 1)[0]
	if !bytes.Equal(got.data, pkt) {
		t.Fatalf("packet with IP options: got %d bytes %x..., want %d bytes %x...", len(got.data), got.data[:8], len(pkt), pkt[:8])
	}
}

// sendWithIPOptions sends a test packet to port on lo4 from a raw socket
// that adds four bytes of IPv4 options (three no-ops and end of list),
// and returns it.
func sendWithIPOptions(t *testing.T, port uint16) []byte {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, ipProtoHoma)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptString(fd, unix.IPPROTO_IP, unix.IP_OPTIONS, "\x01\x01\x01\x00"); err != nil {
		t.Fatalf("IP_OPTIONS: %v", err)
	}
	pkt := testPacket(1, port, 300, 0x0b7)
	if err := unix.Sendto(fd, pkt, 0, &unix.SockaddrInet4{Addr: lo4.As4()}); err != nil {
		t.Fatal(err)
	}
	return pkt
}

func TestRawPortReservation(t *testing.T) {
	a := openRaw(t, lo4, 0, nil)
	b := openRaw(t, netip.IPv4Unspecified(), 0, nil)
	if a.Port() < MinClientPort || b.Port() < MinClientPort || a.Port() == b.Port() {
		t.Fatalf("client ports %d and %d: want distinct ports >= %d", a.Port(), b.Port(), MinClientPort)
	}
	// An explicit port held by another Conn, on another address too.
	for _, laddr := range []netip.Addr{lo4, netip.IPv4Unspecified()} {
		if c, err := OpenRaw(laddr, a.Port(), nil); !errors.Is(err, ErrPortInUse) {
			if c != nil {
				c.Close()
			}
			t.Fatalf("OpenRaw(%v, taken port %d) = %v, want ErrPortInUse", laddr, a.Port(), err)
		}
	}
	// Explicit twice.
	c := openRandomPort(t, func(p uint16) (Conn, error) { return OpenRaw(lo4, p, nil) })
	port := c.Port()
	if _, err := OpenRaw(lo4, port, nil); !errors.Is(err, ErrPortInUse) {
		t.Fatalf("second OpenRaw(%d) = %v, want ErrPortInUse", port, err)
	}
	// Close releases the port.
	c.Close()
	d := openRaw(t, lo4, port, nil)
	if d.Port() != port {
		t.Fatalf("reopened Port() = %d, want %d", d.Port(), port)
	}
	// IPv6 has its own port space: the same number is free there.
	e, err := OpenRaw(lo6, port, nil)
	if err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
		t.Fatalf("OpenRaw(::1, %d) with the IPv4 port taken: %v", port, err)
	}
	if e != nil {
		e.Close()
	}
}

// childEnv names the port of the parent Conn for the child process.
const childEnv = "HOMA_NETIO_TEST_CHILD_PARENT_PORT"

// TestRawIsolationAcrossProcesses runs a second process (this test binary,
// running TestRawChildProcess) holding a raw Conn on its own port, and
// checks that each side reads only its own packets, that the child's port
// is reserved host-wide, and that the reservation dies with the process.
func TestRawIsolationAcrossProcesses(t *testing.T) {
	a := openRaw(t, lo4, 0, nil)
	cmd := exec.Command(os.Args[0], "-test.run=^TestRawChildProcess$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+strconv.Itoa(int(a.Port())))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	// wait reaps the child after its output has been read to the end.
	waited := false
	wait := func() error {
		waited = true
		for range lines {
		}
		return cmd.Wait()
	}
	t.Cleanup(func() {
		if !waited {
			cmd.Process.Kill()
			wait()
		}
	})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if s, ok := strings.CutPrefix(sc.Text(), "CHILD: "); ok {
				lines <- s
			} else {
				t.Logf("child: %s", sc.Text())
			}
		}
		close(lines)
	}()
	next := func() string {
		select {
		case s, ok := <-lines:
			if !ok {
				t.Fatal("child exited early")
			}
			return s
		case <-time.After(safetyTimeout):
			t.Fatal("child said nothing (safety timeout)")
		}
		return ""
	}
	var childPort uint16
	if _, err := fmt.Sscanf(next(), "port %d", &childPort); err != nil {
		t.Fatal(err)
	}
	if c, err := OpenRaw(lo4, childPort, nil); !errors.Is(err, ErrPortInUse) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("OpenRaw(child's port %d) = %v, want ErrPortInUse", childPort, err)
	}
	// Interleave packets for the child and for ourselves, then an end
	// marker for the child.
	const k = 5
	for i := range k {
		writeAll(t, a, lo4, 0, testPacket(a.Port(), childPort, 64, uint64(0xc00+i)))
		writeAll(t, a, lo4, 0, testPacket(a.Port(), a.Port(), 64, uint64(0xa00+i)))
	}
	writeAll(t, a, lo4, 0, testPacket(a.Port(), childPort, 64, 0xcff))
	// The child answers with k packets and an end marker of its own.
	got := readN(t, a, 2*k+1)
	var mine, fromChild int
	for _, r := range got {
		tag := tagOf(r.data)
		switch {
		case dstPort(r.data) != a.Port():
			t.Errorf("parent read a packet for port %d (tag %#x)", dstPort(r.data), tag)
		case tag >= 0xa00 && tag < 0xa00+k:
			mine++
		case tag >= 0xd00 && tag <= 0xdff:
			fromChild++
		default:
			t.Errorf("parent read an unexpected packet, tag %#x", tag)
		}
	}
	if mine != k || fromChild != k+1 {
		t.Errorf("parent read %d of its own packets and %d from the child, want %d and %d", mine, fromChild, k, k+1)
	}
	if s := next(); s != fmt.Sprintf("ok %d", k+1) {
		t.Errorf("child reported %q", s)
	}
	if err := wait(); err != nil {
		t.Errorf("child: %v", err)
	}
	expectNothing(t, a)
	if d := a.(StatsConn).Stats().Discarded; d != 0 {
		t.Errorf("the kernel passed %d foreign packets to the parent's socket", d)
	}
	// The child's reservation died with it.
	openRaw(t, lo4, childPort, nil)
}

// TestRawChildProcess is the child half of
// TestRawIsolationAcrossProcesses; it skips unless run by it.
func TestRawChildProcess(t *testing.T) {
	ps := os.Getenv(childEnv)
	if ps == "" {
		t.Skip("helper process for TestRawIsolationAcrossProcesses")
	}
	parent, _ := strconv.Atoi(ps)
	c := openRandomPort(t, func(p uint16) (Conn, error) { return OpenRaw(lo4, p, nil) })
	defer c.Close()
	fmt.Printf("CHILD: port %d\n", c.Port())
	pkts := makePackets(8, 1<<16)
	n := 0
	for done := false; !done; {
		k, err := c.ReadBatch(pkts)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pkts[:k] {
			tag := tagOf(p.Bytes())
			if dstPort(p.Buf) != c.Port() || tag < 0xc00 || tag > 0xcff {
				t.Fatalf("child read a packet for port %d, tag %#x", dstPort(p.Buf), tag)
			}
			n++
			done = done || tag == 0xcff
		}
	}
	const k = 5
	for i := range k {
		writeAll(t, c, lo4, 0, testPacket(c.Port(), uint16(parent), 64, uint64(0xd00+i)))
	}
	writeAll(t, c, lo4, 0, testPacket(c.Port(), uint16(parent), 64, 0xdff))
	expectNothing(t, c)
	if d := c.(StatsConn).Stats().Discarded; d != 0 {
		t.Fatalf("the kernel passed %d foreign packets to the child's socket", d)
	}
	fmt.Printf("CHILD: ok %d\n", n)
}

// sniffTOS opens an unfiltered raw protocol 146 socket that reports the
// TOS (IPv4, from the IP header) or traffic class (IPv6, from a control
// message) of each packet, and returns a function that reads until it
// has seen the packet tagged tag.
func sniffTOS(t *testing.T, v6 bool) func(tag uint64) uint8 {
	t.Helper()
	family := unix.AF_INET
	if v6 {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_RAW|unix.SOCK_CLOEXEC, ipProtoHoma)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if v6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1); err != nil {
			t.Fatal(err)
		}
	}
	tv := unix.NsecToTimeval(int64(safetyTimeout))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	return func(tag uint64) uint8 {
		return recvTOS(t, fd, v6, v6, tag)[1]
	}
}

// recvTOS reads from fd until a packet tagged tag arrives and returns its
// TOS / traffic class in the second byte: from the control message when
// fromCmsg, else as the IPv4 header in front of the packet, which it
// returns whole.
func recvTOS(t *testing.T, fd int, v6, fromCmsg bool, tag uint64) []byte {
	t.Helper()
	buf := make([]byte, 1<<16)
	oob := make([]byte, 64)
	for {
		n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, 0)
		if err == unix.EINTR {
			continue // a signal (the runtime's preemption) interrupted the wait
		}
		if err != nil {
			t.Fatalf("sniffer: %v", err)
		}
		pkt := buf[:n]
		if !fromCmsg {
			pkt = pkt[int(buf[0]&0xf)*4:]
		}
		if tagOf(pkt) != tag {
			continue // someone else's packet
		}
		if !fromCmsg {
			return buf[:ipv4HeaderLen]
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if (v6 && m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_TCLASS) ||
				(!v6 && m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TOS) {
				if len(m.Data) >= 4 { // IPV6_TCLASS: a host-order int
					return []byte{0, uint8(binary.NativeEndian.Uint32(m.Data))}
				}
				return []byte{0, m.Data[0]} // IP_TOS: one byte
			}
		}
		t.Fatal("no TOS / traffic class control message")
	}
}

// setTOSMode prepares a Conn for a DSCP test: "cmsg" leaves it alone;
// "setsockopt" makes it set the TOS on the socket as if the kernel had
// refused per-packet control messages; "rejected" gives it control
// messages the kernel refuses (an unknown type), so it must find out and
// fall back by itself.
func setTOSMode(c Conn, mode string) {
	sc := c.(*sockConn)
	switch mode {
	case "setsockopt":
		sc.wr.mu.Lock()
		sc.wr.noCmsg = true
		sc.wr.mu.Unlock()
	case "rejected":
		for p := range sc.cmsg {
			bad := tosCmsg(sc.v6, sc.tos[p])
			(*unix.Cmsghdr)(unsafe.Pointer(&bad[0])).Type = 0x7ff
			sc.cmsg[p] = bad
		}
	}
}

func TestRawDSCP(t *testing.T) {
	for _, fam := range families {
		for _, mode := range []string{"cmsg", "setsockopt", "rejected"} {
			t.Run(fam.name+"/"+mode, func(t *testing.T) {
				a := openRaw(t, fam.lo, 0, nil)
				b := openRaw(t, fam.lo, 0, nil)
				setTOSMode(a, mode)
				sniff := sniffTOS(t, fam.lo.Is6())
				tag := uint64(time.Now().UnixNano()) << 8
				prios := []uint8{0, 3, 7, 7, 3}
				var bufs [][]byte
				pkts := make([]Packet, len(prios))
				for i, p := range prios {
					bufs = append(bufs, testPacket(a.Port(), b.Port(), 64, tag+uint64(i)))
					pkts[i] = Packet{Buf: bufs[i], N: 64, Addr: fam.lo, Priority: p}
				}
				if n, err := a.WriteBatch(pkts); n != len(pkts) || err != nil {
					t.Fatalf("WriteBatch = %d, %v", n, err)
				}
				for i, p := range prios {
					if got, want := sniff(tag+uint64(i)), DefaultDSCP.TOS(p); got != want {
						t.Errorf("priority %d: TOS %#x, want %#x", p, got, want)
					}
				}
				readN(t, b, len(prios))
				// A header-including socket (raw IPv4) writes the TOS
				// in its headers and never tries a control message.
				sc := a.(*sockConn)
				want := mode == "setsockopt" || (mode == "rejected" && !sc.hdrincl)
				if sc.wr.noCmsg != want {
					t.Errorf("noCmsg = %v after sending in %s mode, want %v", sc.wr.noCmsg, mode, want)
				}
			})
		}
	}
}

func TestRawDSCPMap(t *testing.T) {
	m := DSCP{1, 2, 3, 4, 5, 6, 7, 46}
	a := openRaw(t, lo4, 0, &Options{DSCP: &m})
	b := openRaw(t, lo4, 0, nil)
	sniff := sniffTOS(t, false)
	tag := uint64(time.Now().UnixNano()) << 8
	writeAll(t, a, lo4, 7, testPacket(a.Port(), b.Port(), 64, tag))
	if got := sniff(tag); got != 46<<2 {
		t.Errorf("TOS %#x, want %#x (DSCP EF)", got, 46<<2)
	}
}

func TestRawMaxPacket(t *testing.T) {
	a := openRaw(t, lo4, 0, nil)
	if got, want := a.MaxPacket(lo4), maxIPv4Total-ipv4HeaderLen; got != want {
		t.Errorf("IPv4 loopback MaxPacket = %d, want %d (MTU 65536, capped to one datagram)", got, want)
	}
	a6 := openRaw(t, lo6, 0, nil)
	if got, want := a6.MaxPacket(lo6), 65536-ipv6HeaderLen; got != want {
		t.Errorf("IPv6 loopback MaxPacket = %d, want %d", got, want)
	}
	m := openRaw(t, lo4, 0, &Options{MTU: 1500})
	if got := m.MaxPacket(lo4); got != 1480 {
		t.Errorf("MaxPacket with MTU 1500 = %d, want 1480", got)
	}
}

func TestRawBadWrites(t *testing.T) {
	a := openRaw(t, lo4, 0, nil)
	good := testPacket(a.Port(), a.Port(), 64, 1)
	cases := []struct {
		name string
		pkt  Packet
		want error
	}{
		{"wrong family", Packet{Buf: good, N: 64, Addr: lo6}, ErrBadAddr},
		{"no address", Packet{Buf: good, N: 64}, ErrBadAddr},
		{"N beyond Buf", Packet{Buf: good, N: 65, Addr: lo4}, ErrBadPacket},
		{"too short", Packet{Buf: good, N: 3, Addr: lo4}, ErrBadPacket},
	}
	for _, tc := range cases {
		pkts := []Packet{{Buf: good, N: 64, Addr: lo4}, tc.pkt, {Buf: good, N: 64, Addr: lo4}}
		n, err := a.WriteBatch(pkts)
		if n != 1 || !errors.Is(err, tc.want) {
			t.Errorf("%s: WriteBatch = %d, %v; want 1, %v", tc.name, n, err, tc.want)
		}
	}
	readN(t, a, len(cases))
	if _, err := a.ReadBatch([]Packet{{}}); !errors.Is(err, ErrBadPacket) {
		t.Errorf("ReadBatch into an empty Buf = %v, want ErrBadPacket", err)
	}
	// Too big for one IPv4 datagram: the kernel refuses.
	big := make([]byte, maxIPv4Total)
	copy(big, good)
	if n, err := a.WriteBatch([]Packet{{Buf: big, N: len(big), Addr: lo4}}); n != 0 || err == nil {
		t.Errorf("WriteBatch of %d bytes = %d, %v; want an error", len(big), n, err)
	}
}

func TestRawOpenErrors(t *testing.T) {
	if _, err := OpenRaw(netip.Addr{}, 0, nil); !errors.Is(err, ErrBadAddr) {
		t.Errorf("OpenRaw(invalid) = %v, want ErrBadAddr", err)
	}
	openRaw(t, lo4, 0, nil) // skips without privileges
	if c, err := OpenRaw(netip.MustParseAddr("192.0.2.1"), 0, nil); err == nil {
		c.Close()
		t.Errorf("OpenRaw on an address not on this host succeeded")
	}
}

func TestRawCloseUnblocks(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			c := openRaw(t, fam.lo, 0, nil)
			checkCloseUnblocks(t, c, readerInside(c))
		})
	}
}

// permEnv marks the child process of TestRawPermission.
const permEnv = "HOMA_NETIO_TEST_UNPRIVILEGED"

// TestRawPermission checks what an unprivileged process gets: OpenRaw
// fails with ErrPermission (wrapping EPERM), OpenUDP works. Run as root,
// it re-executes itself and drops to user nobody in the child.
func TestRawPermission(t *testing.T) {
	switch {
	case os.Getenv(permEnv) != "":
		// The parent is root: dropping to nobody must work, and must
		// take CAP_NET_RAW with it.
		if err := syscall.Setgid(65534); err != nil {
			t.Fatalf("cannot drop privileges: %v", err)
		}
		if err := syscall.Setuid(65534); err != nil {
			t.Fatalf("cannot drop privileges: %v", err)
		}
		checkUnprivileged(t, true)
		fmt.Println("CHILD: checked")
	case os.Geteuid() != 0:
		checkUnprivileged(t, false)
	default:
		cmd := exec.Command(os.Args[0], "-test.run=^TestRawPermission$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), permEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("unprivileged child: %v\n%s", err, out)
		}
		if !bytes.Contains(out, []byte("CHILD: checked")) {
			t.Fatalf("unprivileged child did not run the checks:\n%s", out)
		}
	}
}

// checkUnprivileged checks OpenRaw and OpenUDP in a process that is not
// root; dropped says that it gave up root itself, so that it cannot have
// been granted CAP_NET_RAW.
func checkUnprivileged(t *testing.T, dropped bool) {
	c, err := OpenRaw(lo4, 0, nil)
	if err == nil && dropped {
		c.Close()
		t.Fatal("OpenRaw works after dropping root to user nobody")
	}
	if err == nil {
		c.Close()
		t.Skip("this process may open raw sockets without root (CAP_NET_RAW granted?)")
	}
	if !errors.Is(err, ErrPermission) || !errors.Is(err, unix.EPERM) {
		t.Fatalf("OpenRaw without privileges = %v, want ErrPermission wrapping EPERM", err)
	}
	u, err := OpenUDP(lo4, 0, nil)
	if err != nil {
		t.Fatalf("OpenUDP without privileges: %v", err)
	}
	u.Close()
}

// A raw IPv4 Conn writes its own IP headers (IP_HDRINCL): they must be
// what the kernel would have written, and the kernel must fill in what
// it is left (length and checksum; the id of a Don't Fragment datagram
// may stay 0, RFC 6864).
func TestRawHeaderIncluded(t *testing.T) {
	a := openRaw(t, lo4, 0, nil)
	b := openRaw(t, lo4, 0, nil)
	if !a.(*sockConn).hdrincl {
		t.Fatal("a raw IPv4 Conn does not write its own headers")
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, ipProtoHoma)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval(int64(safetyTimeout))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	ttl, err := os.ReadFile("/proc/sys/net/ipv4/ip_default_ttl")
	if err != nil {
		t.Fatal(err)
	}
	tag := uint64(time.Now().UnixNano()) << 8
	payload := bytes.Repeat([]byte{0xa5}, 3000)
	hdr := testPacket(a.Port(), b.Port(), 64, tag)
	pkts := []Packet{{Buf: hdr, N: 64, Payload: payload, Addr: lo4, Priority: 5}}
	if n, err := a.WriteBatch(pkts); n != 1 || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	h := recvTOS(t, fd, false, false, tag)
	if h[0] != 0x45 {
		t.Errorf("version and length %#x, want 0x45", h[0])
	}
	if got, want := h[1], DefaultDSCP.TOS(5); got != want {
		t.Errorf("TOS %#x, want %#x", got, want)
	}
	if got, want := binary.BigEndian.Uint16(h[2:]), uint16(ipv4HeaderLen+64+len(payload)); got != want {
		t.Errorf("total length %d, want %d", got, want)
	}
	if got := binary.BigEndian.Uint16(h[6:]); got != 0x4000 {
		t.Errorf("flags and fragment offset %#x, want Don't Fragment", got)
	}
	if got := strconv.Itoa(int(h[8])); got != strings.TrimSpace(string(ttl)) {
		t.Errorf("TTL %s, want the default %s", got, ttl)
	}
	if h[9] != ipProtoHoma {
		t.Errorf("protocol %d", h[9])
	}
	var sum uint32
	for i := 0; i < ipv4HeaderLen; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	if sum != 0xffff {
		t.Errorf("header checksum does not verify (sum %#x)", sum)
	}
	if src, dst := netip.AddrFrom4([4]byte(h[12:16])), netip.AddrFrom4([4]byte(h[16:20])); src != lo4 || dst != lo4 {
		t.Errorf("addresses %v -> %v, want %v both", src, dst, lo4)
	}
	got := readN(t, b, 1)[0]
	if !bytes.Equal(got.data[64:], payload) {
		t.Error("payload changed on the way")
	}
}
