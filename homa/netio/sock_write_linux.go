//go:build linux

package netio

import (
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Transmit tuning.
const (
	// maxSendPackets bounds the packets one sendmmsg carries (with GSO a
	// message carries several), and so the iovec block: two iovecs, the
	// header and the payload, per packet.
	maxSendPackets = 1024
)

// writeState is the transmit side; mu serializes writers. A batch is up
// to batch messages, each one datagram or, with GSO, a run of packets
// that the kernel cuts into datagrams. Message m's iovecs follow those of
// message m-1 in iov.
type writeState struct {
	mu    sync.Mutex
	hs    [maxBatch]mmsghdr
	names [maxBatch]unix.RawSockaddrInet6
	ctl   [maxBatch][sendCtlWords]uint64 // control messages (8-byte aligned)
	segs  [maxBatch]int                  // packets each message carries
	iov   [2 * maxSendPackets]unix.Iovec
	iph   [maxBatch][ipv4HeaderLen]byte // IP headers, with hdrincl
	niov  int                           // iovecs prepared
	bytes int                           // bytes prepared
	cnt   int                           // messages prepared
	done  int                           // messages sent
	calls int                           // sendmmsg calls that sent something
	errno unix.Errno                    // error of the last syscall, 0 if none
	send  func(fd uintptr) bool
	// batch is the most messages one sendmmsg carries: maxBatch, which
	// benchmarks lower.
	batch int
	// noCmsg is set when the kernel refused a per-packet TOS control
	// message; the TOS is then set on the socket when it changes.
	noCmsg bool
	sticky int // the socket's TOS while noCmsg, -1 if unknown
	// gso says to send runs of packets as GSO datagrams: probed at
	// open, turned off when the kernel refuses one. gsoDoubt is set
	// while the refusal may have been the TOS control message's fault
	// (EINVAL): if the same packets without GSO fail the same way, the
	// TOS message goes and GSO comes back.
	gso      atomic.Bool
	gsoDoubt bool
	gsoMax   int       // the largest GSO payload: one UDP datagram's
	errq     *errQueue // the reader's, to leave it a hint
}

// sendmmsg sends the prepared messages. With reports on, a send may fail
// with the socket's pending ICMP error instead of being sent (UDP takes
// the error on its way out): the message is retried, up to
// maxSendRefusals times in a row, and the reader is told to look at the
// error queue, where the report waits. Like recvmmsg it never blocks (a
// full send buffer gives EAGAIN, and the caller waits for room), and is
// a raw system call unless its batch is large (socketCall).
func (w *writeState) sendmmsg(fd uintptr) bool {
	refused := 0
	for w.done < w.cnt {
		r, _, e := socketCall(w.bytes, unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&w.hs[w.done])), uintptr(w.cnt-w.done), unix.MSG_DONTWAIT)
		switch {
		case e == 0:
			w.done += int(r)
			w.calls++
			refused = 0
		case e == unix.EINTR:
		case e == unix.EAGAIN:
			return false // wait until the socket is writable
		case w.errq.on && socketError(e):
			w.errq.hint.Store(true)
			if refused++; refused <= maxSendRefusals {
				continue
			}
			fallthrough
		default:
			w.errno = e
			return true
		}
	}
	return true
}

// sent returns the packets carried by the messages sent.
func (w *writeState) sent() int {
	n := 0
	for _, k := range w.segs[:w.done] {
		n += k
	}
	return n
}

// clear drops the references to caller buffers held by the batch.
func (w *writeState) clear() {
	for i := range w.cnt {
		w.hs[i].hdr.Iov = nil
		w.hs[i].hdr.Control = nil
	}
	for i := range w.niov {
		w.iov[i].Base = nil
	}
}

// WriteBatch implements Conn. It stops at the first packet that cannot be
// sent and returns how many went before it and why. Header and payload
// go to the kernel as two iovecs, without a copy here.
func (c *sockConn) WriteBatch(pkts []Packet) (int, error) {
	w := &c.wr
	w.mu.Lock()
	defer w.mu.Unlock()
	sent := 0
	defer func() { c.stats.written.Add(uint64(sent)) }()
	for sent < len(pkts) {
		perr := c.prepareWrite(pkts[sent:])
		if w.cnt > 0 {
			err := c.rc.Write(w.send)
			sent += w.sent()
			c.stats.sendCalls.Add(uint64(w.calls))
			c.stats.sendDatagrams.Add(uint64(w.done))
			w.clear()
			if err != nil {
				return sent, err
			}
			if w.errno != 0 {
				if c.retryAfter(w.errno) {
					continue
				}
				return sent, os.NewSyscallError("sendmmsg", w.errno)
			}
			w.gsoDoubt = false
		}
		if perr != nil {
			return sent, perr
		}
	}
	return sent, nil
}

// retryAfter decides, after the kernel refused message w.done with e,
// whether to send again differently: without GSO when it refused a GSO
// datagram (EIO, EINVAL); without TOS control messages when it refused
// one (EINVAL), which, if it came right after a GSO refusal, was the
// TOS message's fault: GSO comes back on.
func (c *sockConn) retryAfter(e unix.Errno) bool {
	w := &c.wr
	switch {
	case w.segs[w.done] > 1 && (e == unix.EIO || e == unix.EINVAL):
		w.gso.Store(false)
		w.gsoDoubt = e == unix.EINVAL && !w.noCmsg
		c.stats.gsoFallbacks.Add(1)
		return true
	case e == unix.EINVAL && !w.noCmsg:
		// The kernel may not take IP_TOS / IPV6_TCLASS per packet: set
		// it on the socket instead, from now on.
		w.noCmsg = true
		if w.gsoDoubt {
			w.gso.Store(true)
			w.gsoDoubt = false
		}
		return true
	}
	return false
}

// prepareWrite fills the write block from the head of pkts: each message
// is one packet or, with GSO, a run of them. If it stopped at a bad
// packet or a failed setsockopt, it returns the error for the packet
// after the messages prepared.
func (c *sockConn) prepareWrite(pkts []Packet) error {
	w := &c.wr
	w.cnt, w.done, w.calls, w.errno, w.niov, w.bytes = 0, 0, 0, 0, 0, 0
	sticky := w.noCmsg && !c.hdrincl // the TOS is set on the socket
	if sticky && len(pkts) > 0 {
		if err := c.setStickyTOS(pkts[0].Priority); err != nil {
			return err
		}
	}
	gso := w.gso.Load()
	for i := 0; i < len(pkts) && w.cnt < w.batch && w.niov+3 <= len(w.iov); {
		p := &pkts[i]
		if sticky && c.tos[p.Priority&7] != uint8(w.sticky) {
			break // sent after a setsockopt in the next round
		}
		size, err := CheckWrite(p, c.maxLen)
		if err != nil {
			return err
		}
		m := w.cnt
		salen, err := c.fillSockaddr(&w.names[m], p)
		if err != nil {
			return err
		}
		first := w.niov
		if c.hdrincl {
			c.ipv4Header(&w.iph[m], size, p.Addr.Unmap().As4(), c.tos[p.Priority&7])
			v := &w.iov[w.niov]
			v.Base = &w.iph[m][0]
			v.SetLen(ipv4HeaderLen)
			w.niov++
		}
		w.addIov(p)
		k := 1
		if gso {
			k = c.gsoRun(pkts[i:], size)
		}
		h := &w.hs[m]
		h.len = 0
		h.hdr = unix.Msghdr{
			Name:    (*byte)(unsafe.Pointer(&w.names[m])),
			Namelen: salen,
			Iov:     &w.iov[first],
		}
		h.hdr.SetIovlen(w.niov - first)
		ctl := unsafe.Slice((*byte)(unsafe.Pointer(&w.ctl[m][0])), 8*sendCtlWords)[:0]
		if !w.noCmsg && !c.hdrincl {
			ctl = append(ctl, c.cmsg[p.Priority&7]...)
		}
		if k > 1 {
			ctl = appendGSO(ctl, size)
		}
		if len(ctl) > 0 {
			h.hdr.Control = &ctl[0]
			h.hdr.SetControllen(len(ctl))
		}
		w.segs[m] = k
		w.cnt++
		i += k
	}
	return nil
}

// addIov appends the iovecs of p: its header, then its payload if any.
func (w *writeState) addIov(p *Packet) {
	v := &w.iov[w.niov]
	v.Base = &p.Buf[0]
	v.SetLen(p.N)
	w.niov++
	w.bytes += p.N + len(p.Payload)
	if len(p.Payload) > 0 {
		v = &w.iov[w.niov]
		v.Base = &p.Payload[0]
		v.SetLen(len(p.Payload))
		w.niov++
	}
}

// gsoRun extends the message just started with run[0], of size bytes,
// with the packets after it that can share its GSO datagram: valid, to
// the same address and Homa port, with the same TOS, of the same size
// but for the last, which may be shorter, and within the kernel's limits
// and the iovec block. It returns the packets in the message.
func (c *sockConn) gsoRun(run []Packet, size int) int {
	w := &c.wr
	p := &run[0]
	limit := min(len(run), maxGSOSegments, w.gsoMax/size)
	k := 1
	for ; k < limit && w.niov+2 <= len(w.iov); k++ {
		q := &run[k]
		qsize, err := CheckWrite(q, size)
		if err != nil || q.Addr != p.Addr || c.tos[q.Priority&7] != c.tos[p.Priority&7] || dstPort(q.Buf) != dstPort(p.Buf) {
			break
		}
		w.addIov(q)
		if qsize < size {
			return k + 1
		}
	}
	return k
}

// setStickyTOS sets the socket's TOS / traffic class for priority p when
// per-packet control messages are not available.
func (c *sockConn) setStickyTOS(p uint8) error {
	tos := int(c.tos[p&7])
	if c.wr.sticky == tos {
		return nil
	}
	var serr error
	err := c.rc.Control(func(fd uintptr) {
		if c.v6 {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_TCLASS, tos)
		} else {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, tos)
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		c.wr.sticky = -1
		return os.NewSyscallError("setsockopt", err)
	}
	c.wr.sticky = tos
	return nil
}

// fillSockaddr writes the destination of p into sa and returns its length.
// For UDP the port is the packet's Homa destination port.
func (c *sockConn) fillSockaddr(sa *unix.RawSockaddrInet6, p *Packet) (uint32, error) {
	if !sameFamily(c.v6, p.Addr) {
		return 0, ErrBadAddr
	}
	var port [2]byte // network order, as in the packet
	if c.udp {
		copy(port[:], p.Buf[dstPortOff:dstPortOff+2])
	}
	if !c.v6 {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		*sa4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: p.Addr.Unmap().As4()}
		*(*[2]byte)(unsafe.Pointer(&sa4.Port)) = port
		return unix.SizeofSockaddrInet4, nil
	}
	*sa = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: p.Addr.As16()}
	*(*[2]byte)(unsafe.Pointer(&sa.Port)) = port
	if z := p.Addr.Zone(); z != "" {
		sa.Scope_id = c.zones.index(z)
	}
	return unix.SizeofSockaddrInet6, nil
}
