//go:build linux

package rawfloor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// ipv4HeaderMax is the longest IPv4 header (IHL 15), which a raw IPv4
// socket returns in front of the payload.
const ipv4HeaderMax = 60

// socket is one non-blocking raw socket that reads the packets of one
// Pair and kind, and sends to its own address.
type socket struct {
	fd        int
	v6        bool
	tag, kind uint32
}

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

// setup filters the socket, binds and connects it to host, and drops
// whatever it received before the filter was in place.
func (s *socket) setup(host netip.Addr) error {
	filter, err := s.filter()
	if err != nil {
		return err
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.SetsockoptSockFprog(s.fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog); err != nil {
		return fmt.Errorf("rawfloor: attach socket filter: %w", err)
	}
	sa := sockaddr(host)
	if err := unix.Bind(s.fd, sa); err != nil {
		return fmt.Errorf("rawfloor: bind %v: %w", host, err)
	}
	if err := unix.Connect(s.fd, sa); err != nil {
		return fmt.Errorf("rawfloor: connect %v: %w", host, err)
	}
	var b [1]byte
	for {
		if _, err := unix.Read(s.fd, b[:]); err != nil && err != unix.EINTR {
			return nil // EAGAIN: nothing left
		}
	}
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
	raw, err := bpf.Assemble([]bpf.Instruction{
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
	f := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		f[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return f, nil
}

// poll reads one packet without waiting. It returns the packet from the
// Pair's header on, or false if none was queued or it was not one of
// ours (which the filter already excludes).
func (s *socket) poll(buf []byte) ([]byte, bool) {
	n, err := unix.Read(s.fd, buf)
	if err != nil || n <= 0 {
		return nil, false
	}
	pkt := buf[:n]
	if !s.v6 {
		ihl := int(pkt[0]&0xf) * 4
		if ihl < 20 || ihl > n {
			return nil, false
		}
		pkt = pkt[ihl:]
	}
	if len(pkt) < HeaderLen || binary.BigEndian.Uint32(pkt[tagOff:]) != s.tag ||
		binary.BigEndian.Uint32(pkt[kindOff:]) != s.kind {
		return nil, false
	}
	return pkt, true
}

// send writes one packet to the connected address.
func (s *socket) send(pkt []byte) error {
	for {
		_, err := unix.Write(s.fd, pkt)
		if err != unix.EINTR {
			return err
		}
	}
}

func (s *socket) close() error { return unix.Close(s.fd) }
