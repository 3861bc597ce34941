//go:build linux

package netio

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/homa-go/homa/internal/transport/sockfilter"
)

// MaxShards is the largest group OpenUDPGroup opens.
const MaxShards = 256

// OpenUDPGroup opens n UDP Conns (see OpenUDP) bound to one port with
// SO_REUSEPORT, among which the kernel spreads incoming packets by
// their source: every packet from peer reaches Conn ShardOf(peer, n).
// Port 0 takes a free client port. An ICMP report about a packet to
// peer is returned by Conn ShardOf(peer, n) too, whichever socket the
// kernel gave it to. The group is reserved host-wide (an
// abstract unix socket, released with Conn 0), since another socket of
// the same user could otherwise join it. n must be 1..MaxShards.
func OpenUDPGroup(laddr netip.Addr, port uint16, n int, opt *Options) ([]Conn, error) {
	if n < 1 || n > MaxShards {
		return nil, fmt.Errorf("netio: %d shards (1..%d)", n, MaxShards)
	}
	laddr, err := checkLocal(laddr)
	if err != nil {
		return nil, err
	}
	network := udpNetwork(laddr)
	var (
		lease *portLease
		first net.PacketConn
	)
	take := func(p uint16) error {
		var err error
		if lease, err = leaseGroup(laddr.Is6(), p); err != nil {
			return err
		}
		if first, err = listenReuse(network, laddr, p); err != nil {
			lease.release()
		}
		return err
	}
	if port != 0 {
		err = take(port)
	} else {
		port, err = findClientPort(take)
	}
	if err != nil {
		return nil, err
	}
	pcs := []net.PacketConn{first}
	fail := func(err error) ([]Conn, error) {
		for _, pc := range pcs {
			pc.Close()
		}
		lease.release()
		return nil, err
	}
	if err := attachShardProgram(first, n); err != nil {
		return fail(err)
	}
	for range n - 1 {
		pc, err := listenReuse(network, laddr, port)
		if err != nil {
			return fail(err)
		}
		pcs = append(pcs, pc)
	}
	conns := make([]*sockConn, 0, n)
	for i, pc := range pcs {
		var l *portLease
		if i == 0 {
			l = lease
		}
		c, err := newSockConn(pc, laddr, port, true, l, opt)
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			for _, pc := range pcs[i+1:] {
				pc.Close()
			}
			return nil, err
		}
		conns = append(conns, c)
	}
	if n == 1 {
		return []Conn{conns[0]}, nil
	}
	group := make([]*groupConn, n)
	out := make([]Conn, n)
	for i, c := range conns {
		group[i] = &groupConn{sockConn: c, k: i, group: group}
		out[i] = group[i]
	}
	return out, nil
}

// listenReuse binds a UDP socket with SO_REUSEPORT.
func listenReuse(network string, laddr netip.Addr, port uint16) (net.PacketConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), network, netip.AddrPortFrom(laddr, port).String())
	if errors.Is(err, unix.EADDRINUSE) {
		return nil, fmt.Errorf("%w: %d: %w", ErrPortInUse, port, err)
	}
	return pc, err
}

// leaseGroup reserves a UDP group's port host-wide, as leasePort does a
// raw socket's, under a name of its own.
func leaseGroup(v6 bool, port uint16) (*portLease, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("netio: port reservation socket: %w", err)
	}
	fam := "ipv4"
	if v6 {
		fam = "ipv6"
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: "@homa-udp-group-" + fam + "-" + strconv.Itoa(int(port))}); err != nil {
		unix.Close(fd)
		if err == unix.EADDRINUSE {
			return nil, ErrPortInUse
		}
		return nil, fmt.Errorf("netio: reserve port %d: %w", port, err)
	}
	return &portLease{fd: fd}, nil
}

// skfNetOff makes a load's offset relative to the network header
// (SKF_NET_OFF): the program sees the UDP payload at offset 0.
const skfNetOff = 0xfff00000

// shardProgram is ShardOf(source address, Homa source port, n) for the
// kernel: a reuseport program runs on the datagram's payload, which
// begins with the Homa source port, and reads the source address from
// the IP header (IPv4 or IPv6, by the version in its first byte).
func shardProgram(n int) []bpf.Instruction {
	fold := sourceV6Folded()
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: skfNetOff, Size: 1},
		bpf.ALUOpConstant{Op: bpf.ALUOpShiftRight, Val: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 6, SkipTrue: 2},
		sourceV4(),
		bpf.Jump{Skip: uint32(len(fold))},
	}
	prog = append(prog, fold...)
	return append(prog,
		bpf.TAX{},                         // X = address
		bpf.LoadAbsolute{Off: 0, Size: 2}, // Homa source port
		bpf.ALUOpX{Op: bpf.ALUOpXor},
		bpf.TAX{},
		bpf.ALUOpConstant{Op: bpf.ALUOpShiftRight, Val: 16},
		bpf.ALUOpX{Op: bpf.ALUOpXor},
		bpf.ALUOpConstant{Op: bpf.ALUOpMod, Val: uint32(n)},
		bpf.RetA{},
	)
}

// sourceV4 loads an IPv4 packet's source address into A.
func sourceV4() bpf.Instruction { return bpf.LoadAbsolute{Off: skfNetOff + 12, Size: 4} }

// sourceV6Folded loads an IPv6 packet's source address into A, folded
// to 32 bits by XOR of its four words, as ShardOf folds it (X is
// clobbered).
func sourceV6Folded() []bpf.Instruction {
	return []bpf.Instruction{
		bpf.LoadAbsolute{Off: skfNetOff + 8, Size: 4},
		bpf.TAX{},
		bpf.LoadAbsolute{Off: skfNetOff + 12, Size: 4},
		bpf.ALUOpX{Op: bpf.ALUOpXor},
		bpf.TAX{},
		bpf.LoadAbsolute{Off: skfNetOff + 16, Size: 4},
		bpf.ALUOpX{Op: bpf.ALUOpXor},
		bpf.TAX{},
		bpf.LoadAbsolute{Off: skfNetOff + 20, Size: 4},
		bpf.ALUOpX{Op: bpf.ALUOpXor},
	}
}

// attachShardProgram attaches shardProgram to the reuseport group of
// pc, which is bound.
func attachShardProgram(pc net.PacketConn, n int) error {
	f, err := sockfilter.Assemble(shardProgram(n))
	if err != nil {
		return err
	}
	rc, err := pc.(syscall.Conn).SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		prog := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
		serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF, &prog)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("netio: attach reuseport program: %w", serr)
	}
	return nil
}
