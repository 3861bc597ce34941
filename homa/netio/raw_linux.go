//go:build linux

package netio

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strconv"
	"syscall"

	"github.com/homa-go/homa/internal/transport/sockfilter"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// OpenRaw opens a raw IP socket for protocol 146 serving Homa port port on
// laddr. The family of laddr (IPv4, or IPv6) picks the socket's family;
// an unspecified laddr receives on every address of that family, a
// specific one is bound. Port 0 assigns a free client port.
//
// Ports are reserved host-wide (per network namespace), across processes,
// by binding the abstract unix socket "@homa-port-ipv4-<port>" (or ipv6):
// the kernel frees it when the Conn closes or the process dies. IPv4 and
// IPv6 have separate port spaces, so that one endpoint can serve a port on
// both. A taken explicit port gives ErrPortInUse; a process that may not
// open raw sockets gets an error wrapping ErrPermission.
//
// A classic BPF filter in the kernel passes only packets of at least the
// Homa common header whose destination port is port, so Conns in several
// processes share the host's protocol 146 traffic without seeing each
// other's packets.
//
// The kernel still clones every Homa packet arriving over raw IP for
// each protocol 146 socket of the host before its filter runs (200-270
// ns per socket per packet here). So in each process, per network
// namespace, local address and Options, only the first four client
// Conns (port 0) open a socket of their own; the next ones share one
// socket per up to 2,048 of them, whose filter passes their ports, and
// find their packets in a bounded queue of their own (ConnStats.Shared,
// QueueDrops; RawShareStats). A Conn with a socket of its own, a
// server's among them, reads as it would alone. See rawshare_linux.go.
func OpenRaw(laddr netip.Addr, port uint16, opt *Options) (Conn, error) {
	laddr, err := checkLocal(laddr)
	if err != nil {
		return nil, err
	}
	if port == 0 {
		return openClientRaw(laddr, opt)
	}
	return openOwnRaw(laddr, port, opt)
}

// openOwnRaw opens a raw Conn with a socket of its own.
func openOwnRaw(laddr netip.Addr, port uint16, opt *Options) (*sockConn, error) {
	v6 := laddr.Is6()
	lease, port, err := reservePort(v6, port)
	if err != nil {
		return nil, err
	}
	filter, err := portFilter(v6, port)
	if err != nil {
		lease.release()
		return nil, err
	}
	return openRawSocket(laddr, port, filter, lease, opt)
}

// openRawSocket opens the raw socket of a Conn on port with filter. It
// takes ownership of lease (which may be nil) and releases it when it
// fails.
func openRawSocket(laddr netip.Addr, port uint16, filter []unix.SockFilter, lease *portLease, opt *Options) (*sockConn, error) {
	network := "ip4:" + strconv.Itoa(ipProtoHoma)
	if laddr.Is6() {
		network = "ip6:" + strconv.Itoa(ipProtoHoma)
	}
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		return installFilter(rc, filter)
	}}
	pc, err := lc.ListenPacket(context.Background(), network, laddr.String())
	if err != nil {
		lease.release()
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return nil, fmt.Errorf("%w: %w", ErrPermission, err)
		}
		return nil, err
	}
	return newSockConn(pc, laddr, port, false, lease, opt)
}

// homaLenPrologue is the start of the raw sockets' filters: X is set to
// the IP header length (4 * (pkt[0] & 0xf) for IPv4; 0 for IPv6, whose
// raw sockets see the packet from the Homa header on) and A to the
// packet's length less X, the Homa header and what follows it.
func homaLenPrologue(v6 bool) []bpf.Instruction {
	var loadX bpf.Instruction = bpf.LoadMemShift{Off: 0}
	if v6 {
		loadX = bpf.LoadConstant{Dst: bpf.RegX, Val: 0}
	}
	return []bpf.Instruction{loadX, bpf.LoadExtension{Num: bpf.ExtLen}, bpf.ALUOpX{Op: bpf.ALUOpSub}}
}

// portFilter assembles the socket filter of a raw Conn on port. A raw
// IPv4 socket's filter sees the packet from the IP header on (IHL taken
// with the load-MSH idiom); a raw IPv6 socket's sees it from the Homa
// header on. So X is set to the IP header length (or 0), and the rest is
// common: accept when len - X >= 28 and the u16 at X+2 is port.
func portFilter(v6 bool, port uint16) ([]unix.SockFilter, error) {
	const (
		accept = math.MaxUint32 // keep the whole packet
		drop   = 0
	)
	prog := append(homaLenPrologue(v6),
		bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: homaHeaderLen, SkipFalse: 3},
		bpf.LoadIndirect{Off: dstPortOff, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(port), SkipFalse: 1},
		bpf.RetConstant{Val: accept},
		bpf.RetConstant{Val: drop},
	)
	return sockfilter.Assemble(prog)
}

// dropAllFilter passes nothing.
func dropAllFilter() ([]unix.SockFilter, error) {
	return sockfilter.Assemble([]bpf.Instruction{bpf.RetConstant{Val: 0}})
}

// installFilter attaches filter to a fresh raw socket. The socket has
// been receiving every protocol 146 packet since it was created, so it
// first blocks everything, drains what queued up, then lets its own
// port's packets in.
func installFilter(rc syscall.RawConn, filter []unix.SockFilter) error {
	drop, err := dropAllFilter()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		if serr = attachFilter(int(fd), drop); serr != nil {
			return
		}
		var b [1]byte
		for {
			if _, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_DONTWAIT|unix.MSG_TRUNC); err != nil && err != unix.EINTR {
				break
			}
		}
		serr = attachFilter(int(fd), filter)
	})
	if err != nil {
		return err
	}
	return serr
}

func attachFilter(fd int, f []unix.SockFilter) error {
	if err := sockfilter.Attach(fd, f); err != nil {
		return fmt.Errorf("netio: attach socket filter: %w", err)
	}
	return nil
}

// portLease holds a Homa port host-wide: a unix socket bound to an
// abstract name. Abstract names belong to the network namespace and
// disappear with the last descriptor, so a crashed process leaks nothing.
type portLease struct {
	fd int
}

// reservePort takes port, or a free client port when port is 0.
func reservePort(v6 bool, port uint16) (*portLease, uint16, error) {
	if port != 0 {
		l, err := leasePort(v6, port)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: %d", err, port)
		}
		return l, port, nil
	}
	var l *portLease
	port, err := findClientPort(func(p uint16) (err error) {
		l, err = leasePort(v6, p)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	return l, port, nil
}

func leasePort(v6 bool, port uint16) (*portLease, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("netio: port reservation socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: leaseName(v6, port)}); err != nil {
		unix.Close(fd)
		if err == unix.EADDRINUSE {
			return nil, ErrPortInUse
		}
		return nil, fmt.Errorf("netio: reserve port %d: %w", port, err)
	}
	return &portLease{fd: fd}, nil
}

// leaseName is the abstract unix socket name ('@' stands for the leading
// NUL byte) that reserves a Homa port.
func leaseName(v6 bool, port uint16) string {
	fam := "ipv4"
	if v6 {
		fam = "ipv6"
	}
	return "@homa-port-" + fam + "-" + strconv.Itoa(int(port))
}

func (l *portLease) release() {
	if l != nil && l.fd >= 0 {
		unix.Close(l.fd)
		l.fd = -1
	}
}
