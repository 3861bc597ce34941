//go:build linux

package netio

import (
	"encoding/binary"
	"errors"
	"net"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// How a socket's ICMP errors reach a Conn (Options.ReportUnreachable).
//
// With IP_RECVERR / IPV6_RECVERR set, the kernel answers an ICMP error
// for a packet the socket sent in two ways: it queues a message on the
// socket's error queue (the quoted packet from the Homa header on, the
// original destination as its address, a sock_extended_err control
// message with the ICMP type and code) and it sets the socket's pending
// error to the matching errno. The next receive, peek or (UDP) send on the
// socket fails once with that errno, which clears it; the queued message
// stays until read with MSG_ERRQUEUE. Without IP_RECVERR an unconnected
// socket sees neither, which is why a Conn without ReportUnreachable
// behaves exactly as before.
//
// So the errno is only a signal. The Conn absorbs it wherever it shows up:
// a receive reads the error queue and then the datagrams; a send retries
// the packet (a failed UDP send was not sent) and leaves a hint for the
// reader; a readiness check (ppoll) that sees POLLERR leaves the same
// hint. The reader reads the error queue when it got the errno, found the
// hint, or is about to park, so no queued report is ever left behind
// while a reader sleeps.

// Error-queue tuning.
const (
	// errCtlLen is the control buffer of one error-queue message: a
	// cmsghdr, sock_extended_err and the offender's sockaddr_in6 need 64
	// bytes on 64-bit Linux.
	errCtlLen = 128
	// maxSendRefusals bounds how often in a row one send is retried after
	// failing with a pending ICMP error; a send that keeps failing with
	// such an errno is a real failure and is returned.
	maxSendRefusals = 4
	// pollRetryMin and pollRetryMax bound the sleep between reads without
	// waiting while a reader cannot park (see
	// sockConn.pollRefused).
	pollRetryMin = 50 * time.Microsecond
	pollRetryMax = time.Millisecond
)

// Linux ABI facts of the error queue (linux/errqueue.h).
const (
	eeOriginICMP  = 2 // SO_EE_ORIGIN_ICMP
	eeOriginICMP6 = 3 // SO_EE_ORIGIN_ICMP6
	// sizeofExtendedErr is sizeof(struct sock_extended_err): errno (4),
	// origin, type, code, pad (1 each), info (4), data (4).
	sizeofExtendedErr = 16
	eeOriginOff       = 4
	eeTypeOff         = 5
	eeCodeOff         = 6
)

// errQueue is the receive side's view of the socket's error queue. Its
// plain fields are guarded by readState.mu (on is set once, at open); the
// atomic ones are shared with writers and WaitReadable.
type errQueue struct {
	on bool // the socket has IP_RECVERR / IPV6_RECVERR
	// hint says the error queue may hold messages that no receive has
	// been told about: a send or a readiness check consumed the signal,
	// or a read stopped for lack of room.
	hint atomic.Bool
	// pollErrs counts the waits that failed without parking a reader.
	pollErrs atomic.Uint64
	// steps counts receive steps and readiness checks run, parked or
	// not: a reader with nothing to read must not run them in a loop.
	steps atomic.Uint64

	n     int                   // slots [0, n) of the batch hold error-queue messages
	kinds [maxBatch]Unreachable // what each of them reports (NotUnreachable: nothing usable)
	hdr   unix.Msghdr           // the recvmsg(MSG_ERRQUEUE) argument
	ctl   [errCtlLen]byte       // its control buffer
}

// setRecvErr asks the kernel to queue ICMP errors on the socket.
func setRecvErr(fd int, v6 bool) error {
	if v6 {
		return unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVERR, 1)
	}
	return unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVERR, 1)
}

// socketError reports whether e can be a socket's pending error set by an
// ICMP error message (the errnos of the kernel's ICMP and ICMPv6 error
// tables).
func socketError(e unix.Errno) bool {
	switch e {
	case unix.ECONNREFUSED, unix.EHOSTUNREACH, unix.ENETUNREACH, unix.ENOPROTOOPT,
		unix.EPROTO, unix.EACCES, unix.EMSGSIZE, unix.EHOSTDOWN, unix.ENONET, unix.EOPNOTSUPP:
		return true
	}
	return false
}

// recvErrs reads up to limit error-queue messages into the next free
// slots of the batch prepared in r (from r.errq.n on), parsing each one's
// control message. When it stops for lack of room rather than because
// the queue is empty it leaves the hint set, so that the next read goes
// on where it stopped.
func (r *readState) recvErrs(fd uintptr, limit int) {
	q := &r.errq
	for k := 0; ; {
		if k == limit || q.n == r.cnt {
			q.hint.Store(true)
			return
		}
		i := q.n
		q.hdr = unix.Msghdr{
			Name:    (*byte)(unsafe.Pointer(&r.names[i])),
			Namelen: unix.SizeofSockaddrInet6,
			// The quote goes into the slot's whole buffer, in one
			// piece: no IP header scratch in front (report strips
			// the header a quote may have) and no landing.
			Iov:     &r.quote[i],
			Control: &q.ctl[0],
		}
		q.hdr.SetIovlen(1)
		q.hdr.SetControllen(len(q.ctl))
		n, _, e := unix.RawSyscall(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&q.hdr)), unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return // EAGAIN: the queue is empty
		}
		r.hs[i].len = uint32(n)
		q.kinds[i] = parseRecvErr(q.ctl[:min(uint64(q.hdr.Controllen), uint64(len(q.ctl)))])
		q.n++
		k++
	}
}

// parseRecvErr finds the IP_RECVERR or IPV6_RECVERR control message in
// ctl (as recvmsg filled it, possibly truncated or, in tests, arbitrary)
// and returns what its ICMP error reports. Anything else, including
// errors of local origin, gives NotUnreachable.
func parseRecvErr(ctl []byte) Unreachable {
	for len(ctl) >= unix.SizeofCmsghdr {
		n, level, typ := cmsgHeader(ctl)
		if n < unix.SizeofCmsghdr || n > uint64(len(ctl)) {
			return NotUnreachable
		}
		data := ctl[unix.SizeofCmsghdr:n]
		if (level == unix.SOL_IP && typ == unix.IP_RECVERR) || (level == unix.SOL_IPV6 && typ == unix.IPV6_RECVERR) {
			if len(data) < sizeofExtendedErr {
				return NotUnreachable
			}
			switch data[eeOriginOff] {
			case eeOriginICMP:
				return classifyICMPv4(data[eeTypeOff], data[eeCodeOff])
			case eeOriginICMP6:
				return classifyICMPv6(data[eeTypeOff], data[eeCodeOff])
			}
			return NotUnreachable
		}
		next := cmsgAlign(n)
		if next >= uint64(len(ctl)) {
			break
		}
		ctl = ctl[next:]
	}
	return NotUnreachable
}

// cmsgHeader decodes a struct cmsghdr (length, level, type) at the start
// of b, which holds at least unix.SizeofCmsghdr bytes.
func cmsgHeader(b []byte) (n uint64, level, typ int32) {
	var h unix.Cmsghdr
	if unsafe.Sizeof(h.Len) == 8 {
		n = binary.NativeEndian.Uint64(b)
	} else {
		n = uint64(binary.NativeEndian.Uint32(b))
	}
	off := unsafe.Sizeof(h.Len)
	return n, int32(binary.NativeEndian.Uint32(b[off:])), int32(binary.NativeEndian.Uint32(b[off+4:]))
}

// cmsgAlign rounds n up to the alignment of control messages (the size of
// a long on Linux), saturating instead of wrapping.
func cmsgAlign(n uint64) uint64 {
	const a = uint64(unsafe.Sizeof(uintptr(0)))
	if n > ^uint64(0)-a {
		return ^uint64(0)
	}
	return (n + a - 1) &^ (a - 1)
}

// pollReady is WaitReadable's readiness check for a Conn with reports: a
// datagram or an error (pending or queued) is ready. Unlike a MSG_PEEK
// receive it does not consume the pending error; it leaves the hint for
// the reader that will read the error queue.
func (q *errQueue) pollReady(fd uintptr) bool {
	q.steps.Add(1)
	pfd := unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	var ts unix.Timespec // zero: do not wait
	for {
		n, _, e := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return true // the read reports it
		}
		if n == 0 {
			return false
		}
		if pfd.Revents&unix.POLLERR != 0 {
			q.hint.Store(true)
		}
		return true
	}
}

// report turns error-queue slot i, read into p.Buf, into a report in p,
// or returns false when it must be discarded: not a destination
// unreachable, for another family, too short, or for a packet sent from
// another Homa port (raw sockets see every protocol 146 socket's errors).
func (c *sockConn) report(i int, p *Packet) bool {
	r := &c.rd
	kind := r.errq.kinds[i]
	sa := &r.names[i]
	family := uint16(unix.AF_INET)
	if c.v6 {
		family = unix.AF_INET6
	}
	if kind == NotUnreachable || sa.Family != family {
		return false
	}
	n := int(r.hs[i].len)
	if c.hdrincl {
		// The kernel quotes a header-including socket's packet from its
		// IP header on.
		if n < ipv4HeaderLen || n > len(p.Buf) {
			return false
		}
		ihl := int(p.Buf[0]&0x0f) * 4
		if ihl < ipv4HeaderLen || n < ihl {
			return false
		}
		n = copy(p.Buf, p.Buf[ihl:n])
	}
	if c.udp && n < ReportMinLen && len(p.Buf) >= ReportMinLen {
		// The ICMP message quoted only the UDP header (RFC 792's
		// minimum). Its ports are the Homa ports: the kernel matched the
		// source port to this socket and gave the destination port as
		// the address's.
		binary.BigEndian.PutUint16(p.Buf, c.port)
		copy(p.Buf[dstPortOff:dstPortOff+2], (*[2]byte)(unsafe.Pointer(&sa.Port))[:])
		n = ReportMinLen
	}
	if n < ReportMinLen || n > len(p.Buf) || !c.mine(srcPort(p.Buf)) {
		return false
	}
	p.N, p.Addr, p.Unreachable = n, c.sockaddrAddr(sa), kind
	return true
}

// pollRefused reports whether err, from a wait for the socket, means
// that the reader cannot park now, and counts it.
//
// A wait fails without parking when its descriptor cannot be waited for:
// Go's netpoller, for one, refuses a descriptor for which epoll reported
// nothing but EPOLLERR (an ICMP error while the send buffer is full),
// until its next event. The Conn waits on an epoll instance of its own,
// which never reports that, so this is a safety net: the caller then
// reads without waiting (which reads the error queue) and sleeps a little
// before trying again, so that it neither spins nor returns the error.
// Errors from a closed Conn are not refusals.
func (c *sockConn) pollRefused(err error) bool {
	if err == nil || c.closed.Load() || errors.Is(err, net.ErrClosed) {
		return false
	}
	c.rd.errq.pollErrs.Add(1)
	return true
}

// nextRetry returns the sleep after d while a reader cannot park:
// pollRetryMin at first, doubling up to pollRetryMax.
func nextRetry(d time.Duration) time.Duration {
	if d == 0 {
		return pollRetryMin
	}
	return min(2*d, pollRetryMax)
}

// waitReadable is WaitReadable: it parks (see pollFD) until peek finds
// something ready. While it cannot park (see pollRefused) it checks
// readiness without waiting and sleeps in between instead.
func (c *sockConn) waitReadable() error {
	var retry time.Duration
	for {
		if c.wake.take() {
			_ = c.pfd.SetReadDeadline(time.Time{})
			return ErrWoken
		}
		err := c.rc.Read(c.rd.peek)
		var again bool
		if err, again = c.woken(err); again {
			continue
		}
		if err == ErrWoken || !c.pollRefused(err) {
			return err
		}
		ready := false
		if err := c.rc.Control(func(fd uintptr) { ready = c.rd.peek(fd) }); err != nil {
			return err
		}
		if ready {
			return nil
		}
		retry = nextRetry(retry)
		c.rd.sleep(retry)
	}
}
