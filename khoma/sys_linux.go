//go:build linux

package khoma

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/homa-go/homa/contract"
)

// Open opens a kernel Homa socket on the local address addr: port 0 for
// a client socket (the kernel assigns a port from HOMA_MIN_DEFAULT_PORT
// up), or a server port 1..32767. server says whether the socket receives
// requests. The address family of addr picks IPv4 or IPv6; the kernel
// binds the port on every address. A kernel without the Homa module gives
// an error matching ErrNoKernelHoma, and a module whose user API is
// neither UAPI613 nor UAPI617 one matching ErrUnknownUAPI (see the
// package doc for how the API is found).
func Open(addr netip.AddrPort, server bool) (*Socket, error) {
	if !addr.Addr().IsValid() || addr.Port() >= HOMA_MIN_DEFAULT_PORT {
		return nil, fmt.Errorf("%w: %v: server ports are 1..%d (0 assigns a client port)", contract.ErrBadAddress, addr, HOMA_MIN_DEFAULT_PORT-1)
	}
	ip := addr.Addr().Unmap()
	if !ip.Is4() {
		ip = addr.Addr()
	}
	c, port, err := openConn(ip, addr.Port(), server)
	if err != nil {
		return nil, err
	}
	return newSocket(c, netip.AddrPortFrom(addr.Addr(), port)), nil
}

// sysConn is a kernel Homa socket, polled by the Go runtime.
type sysConn struct {
	f      *os.File
	rc     syscall.RawConn
	family int
	api    UAPI   // the module's user API, found by detectUAPI
	buf    []byte // the receive buffer region (mmap'd)
	name   unix.RawSockaddrAny
	closed atomic.Bool // close ran
}

func openConn(ip netip.Addr, port uint16, server bool) (*sysConn, uint16, error) {
	family := unix.AF_INET6
	if ip.Is4() {
		family = unix.AF_INET
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, IPPROTO_HOMA)
	if err != nil {
		return nil, 0, socketError(err)
	}
	c := &sysConn{family: family}
	if err := c.setup(fd, ip, port, server); err != nil {
		unix.Close(fd)
		if c.buf != nil {
			unix.Munmap(c.buf)
		}
		return nil, 0, err
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		unix.Munmap(c.buf)
		return nil, 0, fmt.Errorf("khoma: getsockname: %w", err)
	}
	c.f = os.NewFile(uintptr(fd), "homa")
	if c.rc, err = c.f.SyscallConn(); err != nil {
		c.f.Close()
		unix.Munmap(c.buf)
		return nil, 0, fmt.Errorf("khoma: %w", err)
	}
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		port = uint16(sa.Port)
	case *unix.SockaddrInet6:
		port = uint16(sa.Port)
	}
	return c, port, nil
}

// setup finds the module's user API, registers the receive region, binds
// the port and sets the server flag.
func (c *sysConn) setup(fd int, ip netip.Addr, port uint16, server bool) error {
	k := fdKernel(fd)
	api, err := detectUAPI(k, nativeABI)
	if err != nil {
		return err
	}
	c.api = api
	buf, err := unix.Mmap(-1, 0, RegionBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("khoma: mmap receive region: %w", err)
	}
	c.buf = buf
	if err := setRcvbuf(k, api, nativeABI, uint64(uintptr(unsafe.Pointer(&buf[0]))), uint64(len(buf))); err != nil {
		return err
	}
	if port != 0 {
		if err := unix.Bind(fd, sockaddr(netip.AddrPortFrom(ip, port))); err != nil {
			return bindError(port, err)
		}
	}
	flag := 0
	if server {
		flag = 1
	}
	err = unix.SetsockoptInt(fd, SOL_HOMA, SO_HOMA_SERVER, flag)
	if err != nil && !(errors.Is(err, unix.ENOPROTOOPT) && server == (port != 0)) {
		// A module without SO_HOMA_SERVER serves exactly the bound
		// sockets, which is all we need when server matches that.
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			return fmt.Errorf("khoma: setsockopt SO_HOMA_SERVER: %w", err)
		}
		return moduleError("setsockopt SO_HOMA_SERVER", errno, errorMessage(k, api))
	}
	return nil
}

// fdKernel issues the calls of a kernel Homa socket on its descriptor.
type fdKernel int

func (fd fdKernel) ioctl(req uint32, arg unsafe.Pointer) syscall.Errno {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg))
	return e
}

func (fd fdKernel) setsockopt(name int, val unsafe.Pointer, n uintptr) syscall.Errno {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), SOL_HOMA, uintptr(name), uintptr(val), n, 0)
	return e
}

func (c *sysConn) region() []byte { return c.buf }

func (c *sysConn) uapi() UAPI { return c.api }

// info issues HOMAIOCINFO with room for up to maxRPCs RPC records.
func (c *sysConn) info(maxRPCs int) (Info, error) {
	var (
		in   Info
		ierr error
	)
	err := c.rc.Control(func(fd uintptr) {
		in, ierr = readInfo(fdKernel(fd), c.api, nativeABI, maxRPCs)
	})
	if err != nil {
		return Info{}, c.closedError(err)
	}
	return in, ierr
}

func (c *sysConn) sendmsg(dst netip.AddrPort, a *SendmsgArgs, data []byte) error {
	name, namelen := rawSockaddr(dst)
	iov := unix.Iovec{Base: &data[0]}
	iov.SetLen(len(data))
	var msg unix.Msghdr
	msg.Name = (*byte)(unsafe.Pointer(&name))
	msg.Namelen = namelen
	msg.Iov = &iov
	msg.SetIovlen(1)
	// The arguments are found through msg_control; msg_controllen
	// stays 0 so the kernel does not copy them as control messages.
	msg.Control = (*byte)(unsafe.Pointer(a))
	var errno syscall.Errno
	err := c.rc.Write(func(fd uintptr) bool {
		for {
			_, _, e := unix.Syscall(unix.SYS_SENDMSG, fd, uintptr(unsafe.Pointer(&msg)), unix.MSG_DONTWAIT)
			switch e {
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false // no room yet: wait until writable
			}
			errno = e
			return true
		}
	})
	runtime.KeepAlive(data)
	runtime.KeepAlive(a)
	return c.result(err, errno)
}

func (c *sysConn) recvmsg(a *RecvmsgArgs, pages *Ledger) (int, netip.AddrPort, error) {
	var (
		n     int
		errno syscall.Errno
	)
	err := c.rc.Read(func(fd uintptr) bool {
		for {
			sent := pages.Fill(a)
			c.name = unix.RawSockaddrAny{}
			var msg unix.Msghdr
			msg.Name = (*byte)(unsafe.Pointer(&c.name))
			msg.Namelen = unix.SizeofSockaddrAny
			msg.Control = (*byte)(unsafe.Pointer(a))
			msg.SetControllen(SizeofRecvmsgArgs)
			r, _, e := unix.Syscall(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&msg)), unix.MSG_DONTWAIT)
			n = int(r)
			if e != 0 {
				n = -1
			}
			pages.Settle(Taken(sent, n, e, a))
			switch e {
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false // nothing ready: wait until readable
			}
			errno = e
			return true
		}
	})
	runtime.KeepAlive(a)
	if err != nil {
		return 0, netip.AddrPort{}, c.closedError(err)
	}
	peer := peerOf(&c.name)
	if errno != 0 {
		return -1, peer, errno
	}
	return n, peer, nil
}

func (c *sysConn) abort(a *AbortArgs) error {
	var errno syscall.Errno
	err := c.rc.Control(func(fd uintptr) {
		errno = fdKernel(fd).ioctl(c.api.HOMAIOCABORT(), unsafe.Pointer(a))
	})
	runtime.KeepAlive(a)
	return c.result(err, errno)
}

func (c *sysConn) close() error {
	c.closed.Store(true)
	return c.f.Close()
}

func (c *sysConn) free() error {
	if c.buf == nil {
		return nil
	}
	err := unix.Munmap(c.buf)
	c.buf = nil
	return err
}

// closedError maps the error of the RawConn once the file is closed
// (the poller's "use of closed file").
func (c *sysConn) closedError(err error) error {
	if c.closed.Load() || errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("%w: %w", contract.ErrClosed, err)
	}
	return err
}

// socketError maps the failure of socket(2).
func socketError(err error) error {
	switch {
	case errors.Is(err, unix.EPROTONOSUPPORT), errors.Is(err, unix.EAFNOSUPPORT),
		errors.Is(err, unix.ESOCKTNOSUPPORT), errors.Is(err, unix.EPROTOTYPE):
		return fmt.Errorf("%w: socket(SOCK_DGRAM, %d): %w", ErrNoKernelHoma, IPPROTO_HOMA, err)
	}
	return fmt.Errorf("khoma: socket: %w", err)
}

// bindError maps the failure of bind(2).
func bindError(port uint16, err error) error {
	switch {
	case errors.Is(err, unix.EADDRINUSE):
		return fmt.Errorf("%w: port %d: %w", contract.ErrPortInUse, port, err)
	case errors.Is(err, unix.EINVAL):
		return fmt.Errorf("%w: port %d: %w", contract.ErrBadAddress, port, err)
	}
	return fmt.Errorf("khoma: bind port %d: %w", port, err)
}

func sockaddr(ap netip.AddrPort) unix.Sockaddr {
	if ap.Addr().Is4() {
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	}
	return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
}

// rawSockaddr encodes ap as a sockaddr_in or sockaddr_in6.
func rawSockaddr(ap netip.AddrPort) (unix.RawSockaddrAny, uint32) {
	var raw unix.RawSockaddrAny
	port := (*[2]byte)(unsafe.Pointer(&raw.Addr.Data[0]))
	port[0], port[1] = byte(ap.Port()>>8), byte(ap.Port())
	if ap.Addr().Is4() {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&raw))
		sa.Family = unix.AF_INET
		sa.Addr = ap.Addr().As4()
		return raw, unix.SizeofSockaddrInet4
	}
	sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(&raw))
	sa.Family = unix.AF_INET6
	sa.Addr = ap.Addr().As16()
	return raw, unix.SizeofSockaddrInet6
}

// peerOf decodes the sockaddr recvmsg stored.
func peerOf(raw *unix.RawSockaddrAny) netip.AddrPort {
	port := (*[2]byte)(unsafe.Pointer(&raw.Addr.Data[0]))
	p := uint16(port[0])<<8 | uint16(port[1])
	switch raw.Addr.Family {
	case unix.AF_INET:
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(raw))
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), p)
	case unix.AF_INET6:
		sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(raw))
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), p)
	}
	return netip.AddrPort{}
}

// result is the outcome of a system call made through the raw
// connection: err from Control (the socket is closed), else the call's
// errno, else nil.
func (c *sysConn) result(err error, errno syscall.Errno) error {
	if err != nil {
		return c.closedError(err)
	}
	if errno != 0 {
		return errno
	}
	return nil
}
