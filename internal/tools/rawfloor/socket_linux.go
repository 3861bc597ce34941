//go:build linux

package rawfloor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"unsafe"

	"github.com/homa-go/homa/internal/transport/sockfilter"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// socket is one non-blocking raw socket that reads the packets of one
// Pair and kind (or of one client of a Rate), and sends to its own
// address.
type socket struct {
	fd int
	v6 bool
	m  match
	// iph is the IPv4 header an IPv4 socket writes itself (IP_HDRINCL),
	// as the Homa engine's raw Conns do: the kernel then copies a packet
	// plainly instead of summing it as it copies (see homa/netio).
	iph *[ipv4HeaderLen]byte
}

// ipv4HeaderLen is the length of an IPv4 header without options.
const ipv4HeaderLen = 20

// openSocket opens a raw socket of protocol Protocol on host, connected
// to host, that receives only the packets m matches.
func openSocket(host netip.Addr, m match) (*socket, error) {
	host = host.Unmap()
	s := &socket{v6: host.Is6(), m: m}
	family := unix.AF_INET
	if s.v6 {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, Protocol)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return nil, fmt.Errorf("%w: %w", ErrPermission, err)
	}
	if err != nil {
		return nil, fmt.Errorf("rawfloor: raw socket: %w", err)
	}
	s.fd = fd
	if err := s.setup(host); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return s, nil
}

// setup sizes the socket's buffers, filters it, binds and connects it
// to host, and drops whatever it received before the filter was in
// place.
func (s *socket) setup(host netip.Addr) error {
	if err := setBuffer(s.fd, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF); err != nil {
		return fmt.Errorf("rawfloor: receive buffer: %w", err)
	}
	if err := setBuffer(s.fd, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF); err != nil {
		return fmt.Errorf("rawfloor: send buffer: %w", err)
	}
	filter, err := s.filter()
	if err != nil {
		return err
	}
	if err := sockfilter.Attach(s.fd, filter); err != nil {
		return fmt.Errorf("rawfloor: attach socket filter: %w", err)
	}
	sa := sockaddr(host)
	if err := unix.Bind(s.fd, sa); err != nil {
		return fmt.Errorf("rawfloor: bind %v: %w", host, err)
	}
	if err := unix.Connect(s.fd, sa); err != nil {
		return fmt.Errorf("rawfloor: connect %v: %w", host, err)
	}
	if !s.v6 {
		if err := unix.SetsockoptInt(s.fd, unix.IPPROTO_IP, unix.IP_HDRINCL, 1); err != nil {
			return fmt.Errorf("rawfloor: IP_HDRINCL: %w", err)
		}
		a := host.As4()
		s.iph = &[ipv4HeaderLen]byte{0: 0x45, 6: 0x40, 8: 64, 9: Protocol} // Don't Fragment, TTL 64
		copy(s.iph[12:], a[:])
		copy(s.iph[16:], a[:])
	}
	var b [1]byte
	for {
		if _, err := unix.Read(s.fd, b[:]); err != nil && err != unix.EINTR {
			return nil // EAGAIN: nothing left
		}
	}
}

// setBuffer asks for a buffer of sockBufBytes with option force, which
// passes the system's limit (net.core.rmem_max or wmem_max) but needs
// CAP_NET_ADMIN, and falls back to option plain, which the kernel caps
// at that limit.
func setBuffer(fd, force, plain int) error {
	err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, sockBufBytes)
	if errors.Is(err, unix.EPERM) {
		err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, plain, sockBufBytes)
	}
	return err
}

func sockaddr(a netip.Addr) unix.Sockaddr {
	if a.Is4() {
		return &unix.SockaddrInet4{Addr: a.As4()}
	}
	return &unix.SockaddrInet6{Addr: a.As16()}
}

// filter assembles the socket's BPF program: it passes packets at least
// HeaderLen long whose tag, kind (and client) are the match's. A raw
// IPv4 socket's filter sees the packet from the IP header on, a raw
// IPv6 socket's from the payload on; X is set to the IP header length
// (the load-MSH idiom) or 0, and the header fields are read at X plus
// their offsets.
func (s *socket) filter() ([]unix.SockFilter, error) {
	const (
		accept = math.MaxUint32
		drop   = 0
	)
	var loadX bpf.Instruction = bpf.LoadMemShift{Off: 0}
	if s.v6 {
		loadX = bpf.LoadConstant{Dst: bpf.RegX, Val: 0}
	}
	type check struct{ off, val uint32 }
	checks := []check{{tagOff, s.m.tag}, {kindOff, s.m.kind}}
	if s.m.byClient {
		// A Rate's response carries its client's number where a Pair's
		// packet carries its offset.
		checks = append(checks, check{offOff, s.m.client})
	}
	prog := []bpf.Instruction{
		loadX,
		bpf.LoadExtension{Num: bpf.ExtLen},
		bpf.ALUOpX{Op: bpf.ALUOpSub},
		bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: HeaderLen, SkipFalse: uint8(2*len(checks) + 1)},
	}
	for i, c := range checks {
		prog = append(prog,
			bpf.LoadIndirect{Off: c.off, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: c.val, SkipFalse: uint8(2*(len(checks)-1-i) + 1)})
	}
	prog = append(prog, bpf.RetConstant{Val: accept}, bpf.RetConstant{Val: drop})
	f, err := sockfilter.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("rawfloor: socket filter: %w", err)
	}
	return f, nil
}

// recv reads one packet without waiting, scattered over head, body and
// spill in turn (an empty spill is left out), and returns its length. It
// returns errBusy if no packet was queued, or errTruncated if the packet
// was longer than the three buffers together.
func (s *socket) recv(head, body, spill []byte) (int, error) {
	var iov [3]unix.Iovec
	k := 0
	for _, b := range [...][]byte{head, body, spill} {
		if len(b) > 0 {
			iov[k].Base = &b[0]
			iov[k].SetLen(len(b))
			k++
		}
	}
	var msg unix.Msghdr
	msg.Iov = &iov[0]
	msg.SetIovlen(k)
	for {
		n, _, e := unix.Syscall(unix.SYS_RECVMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&msg)), 0)
		switch {
		case e == unix.EINTR:
			continue
		case e != 0:
			return 0, errBusy // EAGAIN, or an error the floor has no use for
		case msg.Flags&unix.MSG_TRUNC != 0:
			return 0, errTruncated
		}
		return int(n), nil
	}
}

// send writes one packet, head and then payload, to the connected
// address. It returns errBusy if the socket has no room for it now.
func (s *socket) send(head, payload []byte) error {
	var iov [3]unix.Iovec
	k := 0
	if s.iph != nil {
		binary.BigEndian.PutUint16(s.iph[2:], uint16(ipv4HeaderLen+len(head)+len(payload)))
		iov[0].Base = &s.iph[0]
		iov[0].SetLen(ipv4HeaderLen)
		k++
	}
	iov[k].Base = &head[0]
	iov[k].SetLen(len(head))
	k++
	if len(payload) > 0 {
		iov[k].Base = &payload[0]
		iov[k].SetLen(len(payload))
		k++
	}
	var msg unix.Msghdr
	msg.Iov = &iov[0]
	msg.SetIovlen(k)
	for {
		_, _, e := unix.Syscall(unix.SYS_SENDMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&msg)), 0)
		switch e {
		case 0:
			return nil
		case unix.EINTR:
			continue
		case unix.EAGAIN, unix.ENOBUFS:
			return errBusy
		}
		return e
	}
}

func (s *socket) close() error { return unix.Close(s.fd) }

// batchIO is the argument block of one recvmmsg or sendmmsg of up to
// RateBatch packets, allocated once.
type batchIO struct {
	hdrs [RateBatch]mmsghdr
	iovs [RateBatch][3]unix.Iovec
	iph  [RateBatch][ipv4HeaderLen]byte // the IPv4 header of each packet sent
}

// mmsghdr is struct mmsghdr, as Go lays it out on every Linux
// architecture: a msghdr, then its length.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
}

func newBatchIO() *batchIO { return &batchIO{} }

// recvBatch reads, without waiting, up to len(bufs) packets (at most
// RateBatch), one into each buf, and sets each one's length in lens (-1
// for a packet longer than its buf). It returns how many it read: 0
// when none was queued.
func (s *socket) recvBatch(b *batchIO, bufs [][]byte, lens []int) int {
	n := min(len(bufs), len(lens), RateBatch)
	for i := range n {
		b.iovs[i][0].Base = &bufs[i][0]
		b.iovs[i][0].SetLen(len(bufs[i]))
		b.hdrs[i].hdr = unix.Msghdr{Iov: &b.iovs[i][0]}
		b.hdrs[i].hdr.SetIovlen(1)
	}
	for {
		r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&b.hdrs[0])), uintptr(n), 0, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0 // EAGAIN, or an error the floor has no use for
		}
		for i := range int(r) {
			lens[i] = int(b.hdrs[i].len)
			if b.hdrs[i].hdr.Flags&unix.MSG_TRUNC != 0 {
				lens[i] = -1
			}
		}
		return int(r)
	}
}

// sendBatch sends each heads[i] then payloads[i] as one packet to the
// connected address, up to RateBatch of them in one system call. It
// returns how many it sent, and errBusy when the socket had room for
// none.
func (s *socket) sendBatch(b *batchIO, heads, payloads [][]byte) (int, error) {
	n := min(len(heads), len(payloads), RateBatch)
	for i := range n {
		iov := &b.iovs[i]
		k := 0
		if s.iph != nil {
			b.iph[i] = *s.iph
			binary.BigEndian.PutUint16(b.iph[i][2:], uint16(ipv4HeaderLen+len(heads[i])+len(payloads[i])))
			iov[k].Base = &b.iph[i][0]
			iov[k].SetLen(ipv4HeaderLen)
			k++
		}
		iov[k].Base = &heads[i][0]
		iov[k].SetLen(len(heads[i]))
		k++
		if len(payloads[i]) > 0 {
			iov[k].Base = &payloads[i][0]
			iov[k].SetLen(len(payloads[i]))
			k++
		}
		b.hdrs[i].hdr = unix.Msghdr{Iov: &iov[0]}
		b.hdrs[i].hdr.SetIovlen(k)
	}
	for {
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&b.hdrs[0])), uintptr(n), 0, 0, 0)
		switch e {
		case 0:
			return int(r), nil
		case unix.EINTR:
			continue
		case unix.EAGAIN, unix.ENOBUFS:
			return 0, errBusy
		}
		return 0, e
	}
}
