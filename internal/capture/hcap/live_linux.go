//go:build linux

package hcap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/homa-go/homa/internal/capture/pcapfile"
)

// Sizes of a live capture.
const (
	// liveFrameMax is the largest frame Next returns whole: a 64 KiB IP
	// packet (loopback's MTU) plus a link-layer header.
	liveFrameMax = 1<<16 + 256
	// liveSocketBuffer is the receive buffer asked for, so that bursts of
	// large messages are not dropped while lines are printed.
	liveSocketBuffer = 8 << 20
)

// Live captures the frames of one network interface, in both directions,
// through an AF_PACKET socket. Next may be called from one goroutine at a
// time; Close may be called from any goroutine and unblocks Next.
type Live struct {
	f        *os.File
	rc       syscall.RawConn
	link     pcapfile.LinkType
	loopback bool
	buf      []byte
}

// OpenLive starts capturing on the interface named iface. It needs
// CAP_NET_RAW (the error then wraps ErrPermission). Interfaces with an
// Ethernet header (Ethernet and loopback) give LinkEthernet frames,
// interfaces without a link-layer header (tun devices, raw IP) LinkRaw;
// others are refused with ErrUnsupported.
func OpenLive(iface string) (*Live, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, fmt.Errorf("hcap: interface %q: %w", iface, err)
	}
	// Protocol 0 receives nothing until the bind below names both the
	// protocol and the interface, so no frame of another interface slips
	// in between.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return nil, fmt.Errorf("%w: %v", ErrPermission, err)
		}
		return nil, fmt.Errorf("hcap: packet socket: %w", err)
	}
	l, err := bindLive(fd, ifi)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("hcap: capture on %s: %w", iface, err)
	}
	return l, nil
}

// bindLive binds the packet socket fd to every protocol on ifi and wraps
// it in a Live. On error the caller closes fd.
func bindLive(fd int, ifi *net.Interface) (*Live, error) {
	all := htons(unix.ETH_P_ALL)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: all, Ifindex: ifi.Index}); err != nil {
		return nil, err
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return nil, err
	}
	ll, ok := sa.(*unix.SockaddrLinklayer)
	if !ok {
		return nil, fmt.Errorf("%w: packet socket address %T", ErrUnsupported, sa)
	}
	l := &Live{loopback: ll.Hatype == unix.ARPHRD_LOOPBACK, buf: make([]byte, liveFrameMax)}
	switch ll.Hatype {
	case unix.ARPHRD_ETHER, unix.ARPHRD_LOOPBACK:
		// Loopback frames carry an Ethernet header with zero addresses.
		l.link = pcapfile.LinkEthernet
	case unix.ARPHRD_NONE, unix.ARPHRD_RAWIP:
		l.link = pcapfile.LinkRaw
	default:
		return nil, fmt.Errorf("%w: link-layer type %d", ErrUnsupported, ll.Hatype)
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, liveSocketBuffer) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, liveSocketBuffer)
	}
	// The socket is non-blocking, so the file is pollable: Close wakes a
	// blocked Next.
	l.f = os.NewFile(uintptr(fd), "packet:"+ifi.Name)
	rc, err := l.f.SyscallConn()
	if err != nil {
		return nil, err
	}
	l.rc = rc
	return l, nil
}

// htons converts a 16-bit value to network byte order, as the packet
// socket's protocol fields want it.
func htons(v uint16) uint16 {
	return binary.NativeEndian.Uint16(binary.BigEndian.AppendUint16(nil, v))
}

// LinkType is the link-layer type of the frames Next returns.
func (l *Live) LinkType() pcapfile.LinkType { return l.link }

// Next waits for the next frame and returns it with the time the kernel
// took it in and its length on the wire. The frame is valid until the
// next call (unlike the records of a pcapfile.Reader). On loopback every
// packet is seen once (the outgoing copy is skipped). A frame longer than
// 64 KiB is cut, and its OrigLen says so. After Close, Next returns an error
// wrapping os.ErrClosed.
func (l *Live) Next() (pcapfile.Record, error) {
	for {
		var (
			n    int
			from unix.Sockaddr
			rerr error
		)
		var at time.Time
		err := l.rc.Read(func(fd uintptr) bool {
			// MSG_TRUNC: n is the frame's whole length, even when
			// only len(l.buf) bytes of it were copied.
			n, from, rerr = unix.Recvfrom(int(fd), l.buf, unix.MSG_TRUNC)
			if rerr == nil {
				at = arrival(int(fd))
			}
			return rerr != unix.EAGAIN
		})
		switch {
		case err != nil:
			return pcapfile.Record{}, err
		case rerr == unix.EINTR:
			continue
		case rerr != nil:
			return pcapfile.Record{}, fmt.Errorf("hcap: read: %w", rerr)
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && l.loopback && ll.Pkttype == unix.PACKET_OUTGOING {
			continue // loopback shows each packet leaving and arriving
		}
		return pcapfile.Record{Time: at, Frame: l.buf[:min(n, len(l.buf))], OrigLen: n}, nil
	}
}

// arrival is the time the kernel took in the frame just read from the
// packet socket fd (SIOCGSTAMPNS), which a capture process slow to read
// (a loaded machine) would otherwise stamp late; the time of the read if
// the kernel does not say.
func arrival(fd int) time.Time {
	var ts unix.Timespec
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCGSTAMPNS, uintptr(unsafe.Pointer(&ts))); errno != 0 {
		return time.Now().UTC()
	}
	return time.Unix(ts.Unix()).UTC()
}

// Close stops the capture. It is safe to call more than once.
func (l *Live) Close() error {
	err := l.f.Close()
	if errors.Is(err, os.ErrClosed) {
		return nil
	}
	return err
}
