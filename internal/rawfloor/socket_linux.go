//go:build linux

package rawfloor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"unsafe"

	"github.com/homa-go/homa/internal/sockfilter"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// socket is one non-blocking raw socket that reads the packets of one
// Pair and kind, and sends to its own address.
type socket struct {
	fd        int
	v6        bool
	tag, kind uint32
	// iph is the IPv4 header an IPv4 socket writes itself (IP_HDRINCL),
	// as the Homa engine's raw Conns do: the kernel then copies a packet
	// plainly instead of summing it as it copies (see homa/netio).
	iph *[ipv4HeaderLen]byte
}

// ipv4HeaderLen is the length of an IPv4 header without options.
const ipv4HeaderLen = 20

// openSocket opens a raw socket of protocol Protocol on host, connected
// to host, that receives only packets carrying tag and kind.
func openSocket(host netip.Addr, tag, kind uint32) (*socket, error) {
	host = host.Unmap()
	s := &socket{v6: host.Is6(), tag: tag, kind: kind}
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

// filter assembles the socket's BPF program. A raw IPv4 socket's filter
// sees the packet from the IP header on, a raw IPv6 socket's from the
// payload on; X is set to the IP header length (the load-MSH idiom) or
// 0, and the header fields are read at X plus their offsets.
func (s *socket) filter() ([]unix.SockFilter, error) {
	const (
		accept = math.MaxUint32
		drop   = 0
	)
	var loadX bpf.Instruction = bpf.LoadMemShift{Off: 0}
	if s.v6 {
		loadX = bpf.LoadConstant{Dst: bpf.RegX, Val: 0}
	}
	f, err := sockfilter.Assemble([]bpf.Instruction{
		loadX,
		bpf.LoadExtension{Num: bpf.ExtLen},
		bpf.ALUOpX{Op: bpf.ALUOpSub},
		bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: HeaderLen, SkipFalse: 5},
		bpf.LoadIndirect{Off: tagOff, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: s.tag, SkipFalse: 3},
		bpf.LoadIndirect{Off: kindOff, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: s.kind, SkipFalse: 1},
		bpf.RetConstant{Val: accept},
		bpf.RetConstant{Val: drop},
	})
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
