package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/homa-go/homa/internal/transport/sockfilter"

	"github.com/homa-go/homa/homa/wire"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Forged packets: Homa packets (built with homa/wire) inside IPv4
// headers written here, so that the source address is whatever a
// scenario says. Every forged source is inside forgedNet, a part of
// 127/8 that the kernel delivers on the loopback device like any other
// loopback address, and every destination is the server on 127.0.0.1.

// forgedNet holds every forged source address: 127.64.0.0/10. Each
// scenario forges from its own /16 of it (forged).
var forgedNet = netip.MustParsePrefix("127.64.0.0/10")

// forged returns the i-th forged address (i from 0) of the /16
// 127.block.0.0: 127.block.0.1, 127.block.0.2, ... It panics if i does
// not fit in the /16 or block is outside forgedNet, which would be a
// bug of the caller.
func forged(block byte, i int) netip.Addr {
	n := i + 1
	a := netip.AddrFrom4([4]byte{127, block, byte(n >> 8), byte(n)})
	if n > 0xfffe || !forgedNet.Contains(a) {
		panic(fmt.Sprintf("forged address %d of block %d out of range", i, block))
	}
	return a
}

const (
	// protoHoma is Homa's IP protocol number.
	protoHoma = 146
	// ipv4HeaderLen is the length of the IPv4 header written here (no
	// options); it is also what every packet costs on top of its Homa
	// bytes when counting bytes on the wire.
	ipv4HeaderLen = 20
	// forgedClientPort is the Homa port of the forged clients and
	// senders: a client port, as a real client's would be.
	forgedClientPort = 40001
)

// sender writes forged IPv4 packets through an IPPROTO_RAW socket, which
// takes the IP header from the caller (IP_HDRINCL is implied). The
// kernel fills in the header checksum and the identification.
type sender struct {
	fd   int
	buf  []byte
	sent uint64 // packets written
}

// errNoRawIP is wrapped by openSender's error when the process may not
// open raw IP sockets (it needs CAP_NET_RAW).
var errNoRawIP = errors.New("needs raw IP sockets (root with CAP_NET_RAW): it forges source addresses")

// canForge reports why this process cannot forge packets (wrapping
// errNoRawIP when it lacks the privilege), or nil.
func canForge() error {
	s, err := openSender()
	if err != nil {
		return err
	}
	return s.close()
}

func openSender() (*sender, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return nil, fmt.Errorf("%w: %w", errNoRawIP, err)
	}
	if err != nil {
		return nil, fmt.Errorf("raw IPv4 socket (IPPROTO_RAW): %w", err)
	}
	return &sender{fd: fd, buf: make([]byte, 0, 64<<10)}, nil
}

// send writes pkt, a whole Homa packet, from src to dst.
func (s *sender) send(src, dst netip.Addr, pkt []byte) error {
	total := ipv4HeaderLen + len(pkt)
	if total > 0xffff {
		return fmt.Errorf("forged packet of %d bytes is too long for IPv4", total)
	}
	b := s.buf[:ipv4HeaderLen]
	clear(b)
	b[0] = 0x45 // version 4, header length 5 words
	binary.BigEndian.PutUint16(b[2:], uint16(total))
	b[8] = 64 // TTL
	b[9] = protoHoma
	src4, dst4 := src.As4(), dst.As4()
	copy(b[12:16], src4[:])
	copy(b[16:20], dst4[:])
	b = append(b, pkt...)
	s.buf = b[:0]
	for {
		err := unix.Sendto(s.fd, b, 0, &unix.SockaddrInet4{Addr: dst4})
		switch {
		case err == nil:
			s.sent++
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENOBUFS):
			// The loopback queue is full for a moment: wait for it.
			time.Sleep(100 * time.Microsecond)
			continue
		}
		return fmt.Errorf("send forged packet from %v: %w", src, err)
	}
}

func (s *sender) close() error { return unix.Close(s.fd) }

// claim is the first DATA packet of a request from a forged client:
// it claims a message of msgLen bytes and carries payload bytes of it,
// as a real client's first packet would (Incoming: the unscheduled
// bytes it says it will send unasked).
func claim(dstPort uint16, id uint64, msgLen uint32, payload int) []byte {
	d := wire.Data{
		Common:        wire.Common{SrcPort: forgedClientPort, DstPort: dstPort, SenderID: id},
		MessageLength: msgLen,
		Incoming:      min(msgLen, 40_000),
		Payload:       make([]byte, payload),
	}
	return d.Append(nil)
}

// capture receives the protocol 146 packets the server sends to forged
// addresses. While it is open the forged hosts are also silent rather
// than unreachable (see openCapture).
type capture struct {
	conn *net.IPConn
}

// openCapture opens a raw socket for protocol 146 whose kernel filter
// passes the packets to forgedNet, or, with keep false, none. Either way
// the socket stands in for the forged hosts: a packet that some raw
// socket of its protocol matches is delivered as far as the kernel is
// concerned, filter or no filter, so the kernel does not answer the
// server with ICMP protocol-unreachable; the server sees forged sources
// as a remote attacker's would look, silent. Without keep it costs
// nothing per packet.
func openCapture(keep bool) (*capture, error) {
	filter, err := dstFilter(forgedNet, keep)
	if err != nil {
		return nil, err
	}
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = sockfilter.Attach(int(fd), filter)
			if serr == nil {
				// Room for a few copies of a 1 MB message.
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 32<<20)
			}
		})
		return errors.Join(err, serr)
	}}
	pc, err := lc.ListenPacket(context.Background(), fmt.Sprintf("ip4:%d", protoHoma), "0.0.0.0")
	if err != nil {
		return nil, fmt.Errorf("raw capture socket: %w", err)
	}
	c := &capture{conn: pc.(*net.IPConn)}
	// Packets that came in before the filter was attached.
	c.flush()
	return c, nil
}

// dstFilter assembles a classic BPF program that passes the IPv4
// packets whose destination is inside p (a raw IPv4 socket's filter
// sees the packet from the IP header on), or, with keep false, none.
func dstFilter(p netip.Prefix, keep bool) ([]unix.SockFilter, error) {
	a := p.Masked().Addr().As4()
	mask := ^uint32(0) << (32 - p.Bits())
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 16, Size: 4}, // destination address
		bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: mask},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: binary.BigEndian.Uint32(a[:]), SkipFalse: 1},
		bpf.RetConstant{Val: 0xffffffff},
		bpf.RetConstant{Val: 0},
	}
	if !keep {
		prog = []bpf.Instruction{bpf.RetConstant{Val: 0}}
	}
	return sockfilter.Assemble(prog)
}

// flush discards the packets queued now.
func (c *capture) flush() {
	var b [1]byte
	for {
		c.conn.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, _, err := c.conn.ReadFrom(b[:]); err != nil {
			return
		}
	}
}

// read returns the next packet (its Homa bytes; the kernel strips the IP
// header) and its source, waiting until deadline. buf must hold a whole
// packet (64 KiB). A timeout is os.ErrDeadlineExceeded.
func (c *capture) read(buf []byte, deadline time.Time) ([]byte, netip.Addr, error) {
	c.conn.SetReadDeadline(deadline)
	n, from, err := c.conn.ReadFrom(buf)
	if err != nil {
		return nil, netip.Addr{}, err
	}
	src, _ := netip.AddrFromSlice(from.(*net.IPAddr).IP.To4())
	return buf[:n], src, nil
}

// typeCounts lists packet counts by type, as "DATA=19 NEED_ACK=3".
func typeCounts(m map[wire.Type]int) string {
	var parts []string
	for t := range wire.Type(255) {
		if n := m[t]; n > 0 {
			parts = append(parts, fmt.Sprintf("%v=%d", t, n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

func (c *capture) close() error { return c.conn.Close() }

// isTimeout says whether err is a read deadline passing.
func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }
