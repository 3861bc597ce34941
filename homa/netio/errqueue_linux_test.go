//go:build linux

package netio

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cmsg builds one control message as the kernel lays it out.
func cmsg(level, typ int32, data []byte) []byte {
	b := make([]byte, unix.CmsgSpace(len(data)))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = level, typ
	h.SetLen(unix.CmsgLen(len(data)))
	copy(b[unix.CmsgLen(0):], data)
	return b
}

// extErr builds a sock_extended_err with its offender address (zeros).
func extErr(errno uint32, origin, typ, code uint8) []byte {
	b := make([]byte, sizeofExtendedErr+unix.SizeofSockaddrInet6)
	binary.NativeEndian.PutUint32(b, errno)
	b[eeOriginOff], b[eeTypeOff], b[eeCodeOff] = origin, typ, code
	return b
}

func recvErr4(origin, typ, code uint8) []byte {
	return cmsg(unix.SOL_IP, unix.IP_RECVERR, extErr(uint32(unix.EHOSTUNREACH), origin, typ, code))
}

func recvErr6(origin, typ, code uint8) []byte {
	return cmsg(unix.SOL_IPV6, unix.IPV6_RECVERR, extErr(uint32(unix.EHOSTUNREACH), origin, typ, code))
}

// Control data the kernel (6.18, x86-64) gave for recvmsg(MSG_ERRQUEUE).
const (
	// UDP to a closed port on 127.0.0.1.
	kernelUDP4PortUnreach = "3000000000000000000000000b0000006f000000020303000000000000000000020000007f0000010000000000000000"
	// Raw IP 146 to a host without a protocol 146 socket.
	kernelRaw4ProtoUnreach = "3000000000000000000000000b0000005c000000020302000000000000000000020000000a93c8020000000000000000"
	// Raw IPv6 146 to such a host: parameter problem, next header.
	kernelRaw6NextHeader = "3c000000000000002900000019000000470000000304010006000000000000000a00000000000000fd0001470000000000000000000000020000000000000000"
	// Raw IP 146 to an address that does not answer ARP.
	kernelRaw4HostUnreach = "3000000000000000000000000b00000071000000020301000000000000000000020000000a93c8010000000000000000"
)

func TestParseRecvErr(t *testing.T) {
	cat := func(bs ...[]byte) []byte { return slices.Concat(bs...) }
	tos := cmsg(unix.SOL_IP, unix.IP_TOS, []byte{0x20})
	short := cmsg(unix.SOL_IP, unix.IP_RECVERR, extErr(0, eeOriginICMP, 3, 3)[:sizeofExtendedErr-1])
	overlong := recvErr4(eeOriginICMP, 3, 3)
	binary.NativeEndian.PutUint32(overlong, uint32(len(overlong)+8)) // cmsg_len beyond the buffer
	tiny := recvErr4(eeOriginICMP, 3, 3)
	binary.NativeEndian.PutUint32(tiny, 4) // cmsg_len below the header
	for _, tc := range []struct {
		name string
		ctl  []byte
		want Unreachable
	}{
		{"v4 port", recvErr4(eeOriginICMP, 3, 3), UnreachablePort},
		{"v4 protocol", recvErr4(eeOriginICMP, 3, 2), UnreachableProtocol},
		{"v4 net", recvErr4(eeOriginICMP, 3, 0), UnreachableHost},
		{"v4 host", recvErr4(eeOriginICMP, 3, 1), UnreachableHost},
		{"v4 admin", recvErr4(eeOriginICMP, 3, 13), UnreachableHost},
		{"v4 unknown code", recvErr4(eeOriginICMP, 3, 200), UnreachableHost},
		{"v4 frag needed", recvErr4(eeOriginICMP, 3, 4), NotUnreachable},
		{"v4 time exceeded", recvErr4(eeOriginICMP, 11, 0), NotUnreachable},
		{"v4 parameter problem", recvErr4(eeOriginICMP, 12, 0), NotUnreachable},
		{"v6 port", recvErr6(eeOriginICMP6, 1, 4), UnreachablePort},
		{"v6 no route", recvErr6(eeOriginICMP6, 1, 0), UnreachableHost},
		{"v6 admin", recvErr6(eeOriginICMP6, 1, 1), UnreachableHost},
		{"v6 address", recvErr6(eeOriginICMP6, 1, 3), UnreachableHost},
		{"v6 next header", recvErr6(eeOriginICMP6, 4, 1), UnreachableProtocol},
		{"v6 bad header field", recvErr6(eeOriginICMP6, 4, 0), NotUnreachable},
		{"v6 too big", recvErr6(eeOriginICMP6, 2, 0), NotUnreachable},
		{"v6 time exceeded", recvErr6(eeOriginICMP6, 3, 0), NotUnreachable},
		{"v4 on a v6 socket", recvErr6(eeOriginICMP, 3, 3), UnreachablePort},
		{"local origin", recvErr4(1, 3, 3), NotUnreachable},
		{"no origin", recvErr4(0, 3, 3), NotUnreachable},
		{"zerocopy origin", recvErr4(5, 3, 3), NotUnreachable},
		{"after another message", cat(tos, recvErr4(eeOriginICMP, 3, 2)), UnreachableProtocol},
		{"wrong level", cmsg(unix.SOL_IPV6, unix.IP_RECVERR, extErr(0, eeOriginICMP, 3, 3)), NotUnreachable},
		{"short extended error", short, NotUnreachable},
		{"length beyond buffer", overlong, NotUnreachable},
		{"length below header", tiny, NotUnreachable},
		{"truncated", recvErr4(eeOriginICMP, 3, 3)[:unix.SizeofCmsghdr+8], NotUnreachable},
		{"other message only", tos, NotUnreachable},
		{"empty", nil, NotUnreachable},
		{"half a header", make([]byte, unix.SizeofCmsghdr-1), NotUnreachable},
	} {
		if got := parseRecvErr(tc.ctl); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestParseRecvErrKernel parses control data a kernel really gave.
func TestParseRecvErrKernel(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 || binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the recorded control data is of a 64-bit little-endian kernel")
	}
	for _, tc := range []struct {
		hex  string
		want Unreachable
	}{
		{kernelUDP4PortUnreach, UnreachablePort},
		{kernelRaw4ProtoUnreach, UnreachableProtocol},
		{kernelRaw6NextHeader, UnreachableProtocol},
		{kernelRaw4HostUnreach, UnreachableHost},
	} {
		b, err := hex.DecodeString(tc.hex)
		if err != nil {
			t.Fatal(err)
		}
		if got := parseRecvErr(b); got != tc.want {
			t.Errorf("%s...: %v, want %v", tc.hex[:16], got, tc.want)
		}
	}
}

func FuzzParseRecvErr(f *testing.F) {
	add := func(ctl []byte) {
		f.Add(ctl, false, uint8(eeOriginICMP), uint8(3), uint8(3), uint8(0), []byte{}, uint16(0))
	}
	add(recvErr4(eeOriginICMP, 3, 3))
	add(recvErr6(eeOriginICMP6, 4, 1))
	add(slices.Concat(cmsg(unix.SOL_IP, unix.IP_TOS, []byte{1}), recvErr4(eeOriginICMP, 3, 1)))
	for _, h := range []string{kernelUDP4PortUnreach, kernelRaw6NextHeader} {
		b, _ := hex.DecodeString(h)
		add(b)
	}
	f.Add([]byte{}, true, uint8(eeOriginICMP6), uint8(1), uint8(4), uint8(3), []byte{9}, uint16(40))
	f.Fuzz(func(t *testing.T, ctl []byte, v6 bool, origin, typ, code, before uint8, other []byte, cut uint16) {
		// Any bytes: what the model finds.
		want := NotUnreachable
		isRecvErr := func(level, typ int32) bool {
			return (level == unix.SOL_IP && typ == unix.IP_RECVERR) || (level == unix.SOL_IPV6 && typ == unix.IPV6_RECVERR)
		}
		if data, ok := cmsgModel(ctl, isRecvErr); ok && len(data) >= sizeofExtendedErr {
			want = icmpKind(data[eeOriginOff], data[eeTypeOff], data[eeCodeOff])
		}
		if got := parseRecvErr(ctl); got != want {
			t.Fatalf("parseRecvErr(%x) = %v; the model finds %v", ctl, got, want)
		}
		// An encoded extended error after other messages, whatever
		// follows it: what it says; cut short: nothing.
		msg := recvErr4(origin, typ, code)
		if v6 {
			msg = recvErr6(origin, typ, code)
		}
		enc := append(fuzzPrefix(before, other), msg...)
		want = icmpKind(origin, typ, code)
		if got := parseRecvErr(append(enc, ctl...)); got != want {
			t.Fatalf("parseRecvErr of origin %d type %d code %d = %v, want %v", origin, typ, code, got, want)
		}
		end := len(enc) - len(msg) + unix.CmsgLen(sizeofExtendedErr+unix.SizeofSockaddrInet6) // without the padding
		if k := int(cut) % end; parseRecvErr(enc[:k]) != NotUnreachable {
			t.Fatalf("parseRecvErr of the first %d of %d bytes = %v", k, end, parseRecvErr(enc[:k]))
		}
	})
}

// icmpKind is what an extended error of origin, with an ICMP type and
// code, reports: only ICMP and ICMPv6 origins report anything.
func icmpKind(origin, typ, code uint8) Unreachable {
	switch origin {
	case eeOriginICMP:
		return classifyICMPv4(typ, code)
	case eeOriginICMP6:
		return classifyICMPv6(typ, code)
	}
	return NotUnreachable
}

// reportConn is a sockConn with one error-queue message in slot 0, for
// testing report.
func reportConn(udp, v6 bool, kind Unreachable, family uint16, dst netip.AddrPort, n int) *sockConn {
	c := &sockConn{port: 1000, udp: udp, v6: v6}
	sa := &c.rd.names[0]
	sa.Family = family
	*(*[2]byte)(unsafe.Pointer(&sa.Port)) = [2]byte{byte(dst.Port() >> 8), byte(dst.Port())}
	if v6 {
		sa.Addr = dst.Addr().As16()
	} else {
		(*unix.RawSockaddrInet4)(unsafe.Pointer(sa)).Addr = dst.Addr().As4()
	}
	c.rd.errq.kinds[0] = kind
	c.rd.hs[0].len = uint32(n)
	return c
}

func TestReport(t *testing.T) {
	dst4 := netip.MustParseAddrPort("10.1.2.3:2000")
	dst6 := netip.MustParseAddrPort("[fd00::3]:2000")
	quoted := testPacket(1000, 2000, homaHeaderLen, 7)
	other := testPacket(1001, 2000, homaHeaderLen, 7)
	for _, tc := range []struct {
		name     string
		udp, v6  bool
		kind     Unreachable
		family   uint16
		buf      []byte // as read
		n        int
		wantN    int // 0: discarded
		wantPort bool
	}{
		{"raw quote", false, false, UnreachableProtocol, unix.AF_INET, quoted, 28, 28, false},
		{"raw ports only", false, false, UnreachableHost, unix.AF_INET, quoted, 4, 4, false},
		{"raw too short", false, false, UnreachablePort, unix.AF_INET, quoted, 3, 0, false},
		{"raw nothing quoted", false, false, UnreachablePort, unix.AF_INET, quoted, 0, 0, false},
		{"raw other port", false, false, UnreachableProtocol, unix.AF_INET, other, 28, 0, false},
		{"raw v6", false, true, UnreachableProtocol, unix.AF_INET6, quoted, 28, 28, false},
		{"not unreachable", false, false, NotUnreachable, unix.AF_INET, quoted, 28, 0, false},
		{"wrong family", false, false, UnreachablePort, unix.AF_INET6, quoted, 28, 0, false},
		{"wrong family v6", false, true, UnreachablePort, unix.AF_INET, quoted, 28, 0, false},
		{"udp quote", true, false, UnreachablePort, unix.AF_INET, quoted, 28, 28, false},
		{"udp header only", true, false, UnreachablePort, unix.AF_INET, make([]byte, 64), 0, 4, true},
		{"udp header only v6", true, true, UnreachablePort, unix.AF_INET6, make([]byte, 64), 0, 4, true},
		{"udp 2 bytes", true, false, UnreachablePort, unix.AF_INET, make([]byte, 64), 2, 4, true},
		{"udp header only, tiny buf", true, false, UnreachablePort, unix.AF_INET, make([]byte, 3), 0, 0, false},
		{"udp other port", true, false, UnreachablePort, unix.AF_INET, other, 28, 0, false},
		{"longer than buf", false, false, UnreachablePort, unix.AF_INET, quoted, 29, 0, false},
	} {
		dst := dst4
		if tc.v6 {
			dst = dst6
		}
		c := reportConn(tc.udp, tc.v6, tc.kind, tc.family, dst, tc.n)
		p := Packet{Buf: slices.Clone(tc.buf)}
		ok := c.report(0, &p)
		if ok != (tc.wantN > 0) {
			t.Errorf("%s: kept %v, want %v", tc.name, ok, tc.wantN > 0)
			continue
		}
		if !ok {
			continue
		}
		if p.N != tc.wantN || p.Unreachable != tc.kind || p.Addr != dst.Addr() {
			t.Errorf("%s: N %d, %v from %v; want N %d, %v from %v", tc.name, p.N, p.Unreachable, p.Addr, tc.wantN, tc.kind, dst.Addr())
		}
		if tc.wantPort && (srcPort(p.Buf) != 1000 || dstPort(p.Buf) != 2000) {
			t.Errorf("%s: synthesized ports %d -> %d, want 1000 -> 2000", tc.name, srcPort(p.Buf), dstPort(p.Buf))
		}
	}
}

func FuzzReport(f *testing.F) {
	f.Add(false, false, uint8(UnreachablePort), uint16(unix.AF_INET), 28, testPacket(1000, 2000, 28, 1))
	f.Add(true, true, uint8(UnreachablePort), uint16(unix.AF_INET6), 0, []byte{1, 2, 3, 4, 5})
	f.Fuzz(func(t *testing.T, udp, v6 bool, kind uint8, family uint16, n int, buf []byte) {
		if len(buf) == 0 {
			return // ReadBatch refuses an empty Buf before any read
		}
		n = min(max(n, 0), len(buf)) // the kernel never returns more than the Buf
		dst := netip.MustParseAddrPort("10.1.2.3:2000")
		if v6 {
			dst = netip.MustParseAddrPort("[fd00::3]:2000")
		}
		c := reportConn(udp, v6, Unreachable(kind), family, dst, n)
		p := Packet{Buf: buf}
		if !c.report(0, &p) {
			return
		}
		if p.N < ReportMinLen || p.N > len(p.Buf) || srcPort(p.Buf) != 1000 || p.Unreachable == NotUnreachable {
			t.Fatalf("kept a report with N %d of %d bytes, source port %d, %v", p.N, len(p.Buf), srcPort(p.Buf), p.Unreachable)
		}
		if p.Unreachable != Unreachable(kind) || p.Addr != dst.Addr() {
			t.Fatalf("kept a report of %v from %v; the error queue said %v from %v", p.Unreachable, p.Addr, Unreachable(kind), dst.Addr())
		}
	})
}

// refusingRawConn is a syscall.RawConn whose Read fails, as the netpoller
// does while it sees only EPOLLERR, the first refuse times it is called,
// calling onRefuse with the count each time.
type refusingRawConn struct {
	syscall.RawConn
	refuse   int
	refused  int
	onRefuse func(int)
}

func (r *refusingRawConn) Read(f func(uintptr) bool) error {
	if r.refused < r.refuse {
		r.refused++
		r.onRefuse(r.refused)
		if err := r.RawConn.Control(func(uintptr) {}); err != nil {
			return err // closed meanwhile
		}
		return &net.OpError{Op: "raw-read", Net: "udp", Err: errors.New("not pollable")}
	}
	return r.RawConn.Read(f)
}

// refusingPair opens a reporting UDP Conn whose netpoller refuses to park
// its reader refuse times, a peer for it, and a record of its sleeps.
func refusingPair(t *testing.T, refuse int, onRefuse func(a *sockConn, b Conn, k int)) (*sockConn, Conn, *[]time.Duration) {
	a := openUDP(t, lo4, 0, reportOpts).(*sockConn)
	b := openUDP(t, lo4, 0, nil)
	sleeps := new([]time.Duration)
	a.rd.sleep = func(d time.Duration) { *sleeps = append(*sleeps, d) }
	a.rc = &refusingRawConn{RawConn: a.rc, refuse: refuse, onRefuse: func(k int) { onRefuse(a, b, k) }}
	return a, b, sleeps
}

var retries = []time.Duration{50 * time.Microsecond, 100 * time.Microsecond, 200 * time.Microsecond,
	400 * time.Microsecond, 800 * time.Microsecond, time.Millisecond, time.Millisecond}

// TestPollRefused checks how a reader rides out a netpoller that will
// not park it: it reads without waiting, sleeps with a growing backoff
// between tries instead of spinning, returns what arrives (and no error),
// and ends with Close.
func TestPollRefused(t *testing.T) {
	const refuse = 8
	t.Run("ReadBatch", func(t *testing.T) {
		a, _, sleeps := refusingPair(t, refuse, func(a *sockConn, b Conn, k int) {
			if k == refuse {
				writeAll(t, b, lo4, 0, testPacket(b.Port(), a.Port(), 64, 0x42))
			}
		})
		pkts := makePackets(4, 2048)
		n, err := a.ReadBatch(pkts)
		if err != nil || n != 1 || tagOf(pkts[0].Bytes()) != 0x42 {
			t.Fatalf("ReadBatch = %d, %v; want the packet", n, err)
		}
		if !slices.Equal(*sleeps, retries) || a.rd.errq.pollErrs.Load() != refuse {
			t.Errorf("slept %v over %d refusals, want %v over %d", *sleeps, a.rd.errq.pollErrs.Load(), retries, refuse)
		}
	})
	t.Run("ReadBatch report", func(t *testing.T) {
		dead := closedUDPPort(t, lo4)
		a, _, sleeps := refusingPair(t, refuse, func(a *sockConn, b Conn, k int) {
			if k == 3 {
				writeAll(t, a, lo4, 0, testPacket(a.Port(), dead, 64, 0x43))
			}
		})
		pkts := makePackets(4, 2048)
		n, err := a.ReadBatch(pkts)
		if err != nil || n != 1 || pkts[0].Unreachable != UnreachablePort || tagOf(pkts[0].Bytes()) != 0x43 {
			t.Fatalf("ReadBatch = %d, %v; want the report", n, err)
		}
		if !slices.Equal(*sleeps, retries[:2]) {
			t.Errorf("slept %v, want %v", *sleeps, retries[:2])
		}
	})
	t.Run("WaitReadable", func(t *testing.T) {
		a, _, sleeps := refusingPair(t, refuse, func(a *sockConn, b Conn, k int) {
			if k == refuse {
				writeAll(t, b, lo4, 0, testPacket(b.Port(), a.Port(), 64, 0x44))
			}
		})
		if err := a.WaitReadable(); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(*sleeps, retries) {
			t.Errorf("slept %v, want %v", *sleeps, retries)
		}
		if n, err := a.TryReadBatch(makePackets(4, 2048)); n != 1 || err != nil {
			t.Errorf("TryReadBatch after WaitReadable = %d, %v; want the packet", n, err)
		}
	})
	t.Run("Close", func(t *testing.T) {
		a, _, _ := refusingPair(t, refuse, func(a *sockConn, b Conn, k int) {
			if k == 3 {
				a.Close()
			}
		})
		if _, err := a.ReadBatch(makePackets(4, 2048)); !errors.Is(err, net.ErrClosed) {
			t.Errorf("ReadBatch after Close = %v, want net.ErrClosed", err)
		}
		b, _, _ := refusingPair(t, refuse, func(a *sockConn, b Conn, k int) {
			if k == 3 {
				a.Close()
			}
		})
		if err := b.WaitReadable(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("WaitReadable after Close = %v, want net.ErrClosed", err)
		}
	})
}
