//go:build linux

package netio

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Tuning.
const (
	// maxBatch is the most messages one recvmmsg / sendmmsg call moves.
	// Larger batches given to ReadBatch are read in part; WriteBatch
	// loops.
	maxBatch = 64
	// defaultSockBuffer is the socket buffer size in each direction: room
	// for several 1 MB messages in flight.
	defaultSockBuffer = 8 << 20
	// fallbackMTU is assumed when the route MTU cannot be found.
	fallbackMTU = 1500
	// maxMTUCache bounds the per-destination MTU cache; when full it is
	// emptied and refilled on demand.
	maxMTUCache = 4096
	// maxZoneCache bounds the IPv6 zone name cache.
	maxZoneCache = 256
)

// sockConn is a raw (IP protocol 146) or UDP Conn on a kernel socket. The
// two differ only in three places, each keyed on udp or ipHdrIn: received
// raw IPv4 packets start with an IP header; UDP destinations carry the
// Homa destination port; MaxPacket subtracts the UDP header.
type sockConn struct {
	pc      net.PacketConn // owns the socket
	rc      syscall.RawConn
	laddr   netip.Addr
	port    uint16
	v6      bool
	udp     bool
	ipHdrIn bool        // raw IPv4: received packets start with the IP header
	mtu     int         // Options.MTU, or 0 to ask the route
	lease   *portLease  // host-wide port reservation (raw only)
	tos     [8]uint8    // TOS / traffic class byte per priority
	cmsg    [8][]byte   // one IP_TOS / IPV6_TCLASS control message per priority
	closed  atomic.Bool // Close ran
	wake    wakeFlag    // Wake was called and no read has returned ErrWoken yet

	rd    readState
	wr    writeState
	mtus  mtuCache
	zones zoneCache
	stats connCounters
}

// mmsghdr is struct mmsghdr: Go lays it out as C does on every Linux
// architecture (msghdr, then a 32-bit length, padded to msghdr's alignment).
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
}

// mmsgs is a reusable recvmmsg / sendmmsg argument block. Its callbacks
// are bound once, so a syscall through syscall.RawConn does not allocate.
type mmsgs struct {
	hs    [maxBatch]mmsghdr
	iov   [2 * maxBatch]unix.Iovec
	names [maxBatch]unix.RawSockaddrInet6 // large enough for either family
	cnt   int                             // messages prepared
	done  int                             // messages received or sent
	errno unix.Errno                      // error of the last syscall, 0 if none
}

// readState is the receive side; mu admits one reader at a time. A
// batch holds error-queue messages in slots [0, errq.n), then datagrams
// in the next done slots.
type readState struct {
	mu sync.Mutex
	mmsgs
	iphdr [maxBatch][ipv4HeaderLen]byte // raw IPv4 header scratch
	wait  func(fd uintptr) bool         // recv, parking when nothing is ready
	now   func(fd uintptr)              // recv, returning when nothing is ready
	peek  func(fd uintptr) bool         // true when a packet (or an error) is queued
	sleep func(time.Duration)           // time.Sleep; tests replace it
	errq  errQueue
}

// writeState is the transmit side; mu serializes writers.
type writeState struct {
	mu sync.Mutex
	mmsgs
	send func(fd uintptr) bool // sendmmsg the prepared messages
	// noCmsg is set when the kernel refused a per-packet TOS control
	// message; the TOS is then set on the socket when it changes.
	noCmsg bool
	sticky int       // the socket's TOS while noCmsg, -1 if unknown
	errq   *errQueue // the reader's, to leave it a hint
}

// recvmmsg receives into the prepared messages from slot from on.
func (m *mmsgs) recvmmsg(fd uintptr, from int) {
	for {
		r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&m.hs[from])), uintptr(m.cnt-from), unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EINTR {
			continue
		}
		m.errno = e
		if e == 0 {
			m.done = int(r)
		}
		return
	}
}

// recv is one receive step, run by the netpoller (wait: returning false
// parks the reader until the socket is ready) or once (TryReadBatch). It
// reads the error queue first when hinted to (into at most half the batch,
// so that a stream of errors cannot starve datagrams), then datagrams. A
// receive that fails with the socket's pending ICMP error sends it to the
// error queue, then it tries the datagrams once more. Before parking it
// reads the error queue once: its signal may have gone to a send.
func (r *readState) recv(fd uintptr, wait bool) bool {
	q := &r.errq
	q.steps.Add(1)
	q.n, r.done, r.errno = 0, 0, 0
	if q.on && q.hint.Swap(false) {
		r.recvErrs(fd, max(1, r.cnt/2))
	}
	for range 2 {
		if q.n == r.cnt {
			return true
		}
		r.recvmmsg(fd, q.n)
		switch {
		case r.errno == 0:
			return true
		case r.errno == unix.EAGAIN:
			if q.on && wait && q.n == 0 {
				r.recvErrs(fd, r.cnt)
			}
			return q.n > 0 || !wait
		case q.on && socketError(r.errno):
			r.errno = 0
			r.recvErrs(fd, r.cnt-q.n)
		default:
			return true
		}
	}
	return true
}

// peekReady reports whether a packet waits in the socket's queue, without
// taking it. Errors count as ready: the next read reports them.
func peekReady(fd uintptr) bool {
	var b [1]byte
	_, _, e := unix.Syscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1, unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
	return e != unix.EAGAIN
}

// sendmmsg sends the prepared messages. With reports on, a send may fail
// with the socket's pending ICMP error instead of being sent (UDP takes
// the error on its way out): the message is retried, up to
// maxSendRefusals times in a row, and the reader is told to look at the
// error queue, where the report waits.
func (w *writeState) sendmmsg(fd uintptr) bool {
	refused := 0
	for w.done < w.cnt {
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&w.hs[w.done])), uintptr(w.cnt-w.done), 0, 0, 0)
		switch {
		case e == 0:
			w.done += int(r)
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

// clear drops the references to caller buffers held in the first n slots.
func (m *mmsgs) clear(n int) {
	for i := range n {
		m.hs[i].hdr.Iov = nil
		m.hs[i].hdr.Control = nil
	}
	for i := range 2 * n {
		m.iov[i].Base = nil
	}
}

// newSockConn wraps an open socket. It takes ownership of pc and lease
// and releases both if it fails.
func newSockConn(pc net.PacketConn, laddr netip.Addr, port uint16, udp bool, lease *portLease, opt *Options) (*sockConn, error) {
	if opt == nil {
		opt = &Options{}
	}
	c := &sockConn{pc: pc, laddr: laddr, port: port, v6: laddr.Is6(), udp: udp, mtu: opt.MTU, lease: lease}
	c.ipHdrIn = !c.v6 && !udp
	r := &c.rd
	r.wait = func(fd uintptr) bool { return r.recv(fd, true) }
	r.now = func(fd uintptr) { r.recv(fd, false) }
	r.peek, r.sleep = peekReady, time.Sleep
	r.errq.on = opt.ReportUnreachable
	if r.errq.on {
		r.peek = r.errq.pollReady
	}
	c.wr.send = c.wr.sendmmsg
	c.wr.sticky = -1
	c.wr.errq = &r.errq
	dscp := opt.DSCP
	if dscp == nil {
		dscp = &DefaultDSCP
	}
	for p := range c.tos {
		c.tos[p] = dscp.TOS(uint8(p))
		c.cmsg[p] = tosCmsg(c.v6, c.tos[p])
	}
	sc, ok := pc.(syscall.Conn)
	if !ok {
		c.Close()
		return nil, errors.New("netio: socket has no raw access")
	}
	var err error
	if c.rc, err = sc.SyscallConn(); err != nil {
		c.Close()
		return nil, err
	}
	rbuf, wbuf := opt.ReadBuffer, opt.WriteBuffer
	if rbuf <= 0 {
		rbuf = defaultSockBuffer
	}
	if wbuf <= 0 {
		wbuf = defaultSockBuffer
	}
	var serr error
	if err := c.rc.Control(func(fd uintptr) {
		setBuffer(int(fd), unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, rbuf)
		setBuffer(int(fd), unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, wbuf)
		if r.errq.on {
			serr = setRecvErr(int(fd), c.v6)
		}
	}); err != nil || serr != nil {
		c.Close()
		if err == nil {
			err = os.NewSyscallError("setsockopt", serr)
		}
		return nil, err
	}
	return c, nil
}

// setBuffer sets a socket buffer size, beyond the sysctl limit when the
// process may (CAP_NET_ADMIN), else up to it. Failure is not fatal: the
// default buffers work, only worse under bursts.
func setBuffer(fd, force, plain, n int) {
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, n) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, plain, n)
	}
}

// tosCmsg builds the control message that sets the IPv4 TOS or IPv6
// traffic class of one sent packet.
func tosCmsg(v6 bool, tos uint8) []byte {
	b := make([]byte, unix.CmsgSpace(4))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = unix.IPPROTO_IP, unix.IP_TOS
	if v6 {
		h.Level, h.Type = unix.IPPROTO_IPV6, unix.IPV6_TCLASS
	}
	h.SetLen(unix.CmsgLen(4))
	binary.NativeEndian.PutUint32(b[unix.CmsgLen(0):], uint32(tos))
	return b
}

// ReadBatch implements Conn.
func (c *sockConn) ReadBatch(pkts []Packet) (int, error) { return c.read(pkts, true) }

// TryReadBatch implements Poller. It also returns 0, nil when another
// goroutine is inside ReadBatch or TryReadBatch. It does not wait for
// the descriptor's read lock, so it runs while another goroutine is
// parked in WaitReadable.
func (c *sockConn) TryReadBatch(pkts []Packet) (int, error) { return c.read(pkts, false) }

// WaitReadable implements Poller: it parks in the runtime's netpoller
// until a packet (or, with reports on, an error) is queued, and leaves it
// there.
func (c *sockConn) WaitReadable() error { return c.waitReadable() }

func (c *sockConn) read(pkts []Packet, wait bool) (int, error) {
	if len(pkts) == 0 {
		return 0, nil
	}
	r := &c.rd
	if wait {
		r.mu.Lock()
	} else if !r.mu.TryLock() {
		return 0, nil
	}
	defer r.mu.Unlock()
	pkts = pkts[:min(len(pkts), maxBatch)]
	var retry time.Duration // nonzero while the netpoller refuses to park us
	for {
		if err := c.prepareRead(pkts); err != nil {
			return 0, err
		}
		var err error
		if wait {
			if c.wake.take() {
				_ = c.pc.SetReadDeadline(time.Time{})
				return 0, ErrWoken
			}
			err = c.rc.Read(r.wait)
			var again bool
			if err, again = c.woken(err); again {
				continue
			}
			if err == ErrWoken {
				r.clear(len(pkts))
				return 0, err
			}
			if c.pollRefused(err) {
				// Read without waiting, the error queue included.
				r.errq.hint.Store(r.errq.on)
				err = c.rc.Control(r.now)
				retry = nextRetry(retry)
			} else {
				retry = 0
			}
		} else {
			err = c.rc.Control(r.now)
		}
		r.clear(len(pkts))
		if err != nil {
			return 0, err
		}
		if r.errno != 0 && r.errno != unix.EAGAIN && r.errq.n == 0 {
			return 0, os.NewSyscallError("recvmmsg", r.errno)
		}
		if n := c.collect(pkts); n > 0 || !wait {
			return n, nil
		}
		if retry > 0 {
			r.sleep(retry)
		}
	}
}

func (c *sockConn) prepareRead(pkts []Packet) error {
	r := &c.rd
	for i := range pkts {
		buf := pkts[i].Buf
		if len(buf) == 0 {
			return ErrBadPacket
		}
		iov := r.iov[2*i : 2*i+2]
		k := 0
		if c.ipHdrIn {
			iov[0].Base = &r.iphdr[i][0]
			iov[0].SetLen(ipv4HeaderLen)
			k = 1
		}
		iov[k].Base = &buf[0]
		iov[k].SetLen(len(buf))
		h := &r.hs[i]
		h.len = 0
		h.hdr = unix.Msghdr{
			Name:    (*byte)(unsafe.Pointer(&r.names[i])),
			Namelen: unix.SizeofSockaddrInet6,
			Iov:     &iov[0],
		}
		h.hdr.SetIovlen(k + 1)
	}
	r.cnt, r.done, r.errno = len(pkts), 0, 0
	return nil
}

// collect turns received messages (reports, then datagrams) into
// Packets, moving the valid ones to the front of pkts, and returns how
// many there are.
func (c *sockConn) collect(pkts []Packet) int {
	r := &c.rd
	w := 0
	for i := range r.errq.n {
		if !c.report(i, &pkts[i]) {
			c.stats.reportsDiscarded.Add(1)
			continue
		}
		if w != i {
			pkts[w], pkts[i] = pkts[i], pkts[w]
		}
		w++
	}
	reports := w
	for i := r.errq.n; i < r.errq.n+r.done; i++ {
		p := &pkts[i]
		n := int(r.hs[i].len)
		ok := r.hs[i].hdr.Flags&unix.MSG_TRUNC == 0
		if c.ipHdrIn {
			n, ok = stripIPv4(r.iphdr[i][:], p.Buf, n, ok)
		}
		if !ok || n < homaHeaderLen || dstPort(p.Buf) != c.port {
			c.stats.discarded.Add(1)
			continue
		}
		p.N = n
		p.Addr = c.sockaddrAddr(&r.names[i])
		p.Unreachable = NotUnreachable
		if w != i {
			pkts[w], pkts[i] = pkts[i], pkts[w]
		}
		w++
	}
	c.stats.read.Add(uint64(w - reports))
	c.stats.reports.Add(uint64(reports))
	return w
}

// stripIPv4 removes the IPv4 header of a packet received as hdr (the
// first ipv4HeaderLen bytes) then buf (the rest), total bytes in all. IP
// options, rare, spill into buf and are moved out of the way.
func stripIPv4(hdr, buf []byte, total int, ok bool) (int, bool) {
	if total < ipv4HeaderLen {
		return 0, false
	}
	ihl := int(hdr[0]&0x0f) * 4
	if ihl < ipv4HeaderLen || total < ihl {
		return 0, false
	}
	if ihl > ipv4HeaderLen {
		copy(buf, buf[ihl-ipv4HeaderLen:total-ipv4HeaderLen])
	}
	return total - ihl, ok
}

func (c *sockConn) sockaddrAddr(sa *unix.RawSockaddrInet6) netip.Addr {
	if !c.v6 {
		return netip.AddrFrom4((*unix.RawSockaddrInet4)(unsafe.Pointer(sa)).Addr)
	}
	a := netip.AddrFrom16(sa.Addr)
	if sa.Scope_id != 0 {
		a = a.WithZone(c.zones.name(sa.Scope_id))
	}
	return a
}

// WriteBatch implements Conn. It stops at the first packet that cannot be
// sent and returns how many went before it and why.
func (c *sockConn) WriteBatch(pkts []Packet) (int, error) {
	w := &c.wr
	w.mu.Lock()
	defer w.mu.Unlock()
	sent := 0
	defer func() { c.stats.written.Add(uint64(sent)) }()
	for sent < len(pkts) {
		cnt, perr := c.prepareWrite(pkts[sent:])
		if cnt > 0 {
			err := c.rc.Write(w.send)
			sent += w.done
			w.clear(cnt)
			if err != nil {
				return sent, err
			}
			if w.errno == unix.EINVAL && !w.noCmsg {
				// The kernel may not take IP_TOS / IPV6_TCLASS per
				// packet: set it on the socket instead, from now on.
				w.noCmsg = true
				continue
			}
			if w.errno != 0 {
				return sent, os.NewSyscallError("sendmmsg", w.errno)
			}
		}
		if perr != nil {
			return sent, perr
		}
	}
	return sent, nil
}

// prepareWrite fills the write block from the head of pkts. It returns
// how many messages it prepared and, if it stopped at a bad packet or a
// failed setsockopt, the error for the packet after them.
func (c *sockConn) prepareWrite(pkts []Packet) (int, error) {
	w := &c.wr
	pkts = pkts[:min(len(pkts), maxBatch)]
	w.cnt, w.done, w.errno = 0, 0, 0
	if w.noCmsg && len(pkts) > 0 {
		if err := c.setStickyTOS(pkts[0].Priority); err != nil {
			return 0, err
		}
	}
	for i := range pkts {
		p := &pkts[i]
		if w.noCmsg && c.tos[p.Priority&7] != uint8(w.sticky) {
			break // sent after a setsockopt in the next round
		}
		if err := checkWrite(p); err != nil {
			return w.cnt, err
		}
		salen, err := c.fillSockaddr(&w.names[i], p)
		if err != nil {
			return w.cnt, err
		}
		w.iov[i].Base = &p.Buf[0]
		w.iov[i].SetLen(p.N)
		h := &w.hs[i]
		h.len = 0
		h.hdr = unix.Msghdr{
			Name:    (*byte)(unsafe.Pointer(&w.names[i])),
			Namelen: salen,
			Iov:     &w.iov[i],
		}
		h.hdr.SetIovlen(1)
		if !w.noCmsg {
			cm := c.cmsg[p.Priority&7]
			h.hdr.Control = &cm[0]
			h.hdr.SetControllen(len(cm))
		}
		w.cnt++
	}
	return w.cnt, nil
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

// LocalAddr implements Conn.
func (c *sockConn) LocalAddr() netip.Addr { return c.laddr }

// Port implements Conn.
func (c *sockConn) Port() uint16 { return c.port }

// Stats implements StatsConn.
func (c *sockConn) Stats() ConnStats { return c.stats.snapshot() }

// MaxPacket implements Conn.
func (c *sockConn) MaxPacket(dst netip.Addr) int {
	mtu := c.mtu
	if mtu <= 0 {
		mtu = c.mtus.get(dst, &c.zones)
	}
	return maxPacketFor(mtu, c.v6, c.udp)
}

// Close implements Conn.
func (c *sockConn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	err := c.pc.Close()
	if c.lease != nil {
		c.lease.release()
	}
	return err
}

// mtuCache remembers the route MTU per destination.
type mtuCache struct {
	mu sync.Mutex
	m  map[netip.Addr]int
}

func (mc *mtuCache) get(dst netip.Addr, zones *zoneCache) int {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if mtu, ok := mc.m[dst]; ok {
		return mtu
	}
	mtu, err := routeMTU(dst, zones)
	if err != nil {
		return fallbackMTU // not cached: the route may appear later
	}
	if mc.m == nil || len(mc.m) >= maxMTUCache {
		mc.m = make(map[netip.Addr]int)
	}
	mc.m[dst] = mtu
	return mtu
}

// routeMTU asks the kernel for the MTU of the route to dst, through a
// connected UDP socket (connecting sends nothing).
func routeMTU(dst netip.Addr, zones *zoneCache) (int, error) {
	if !dst.IsValid() {
		return 0, ErrBadAddr
	}
	dst = dst.Unmap()
	family, level, opt := unix.AF_INET, unix.IPPROTO_IP, unix.IP_MTU
	var sa unix.Sockaddr
	if dst.Is4() {
		sa = &unix.SockaddrInet4{Port: 9, Addr: dst.As4()}
	} else {
		family, level, opt = unix.AF_INET6, unix.IPPROTO_IPV6, unix.IPV6_MTU
		sa6 := &unix.SockaddrInet6{Port: 9, Addr: dst.As16()}
		if z := dst.Zone(); z != "" {
			sa6.ZoneId = zones.index(z)
		}
		sa = sa6
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, sa); err != nil {
		return 0, err
	}
	return unix.GetsockoptInt(fd, level, opt)
}

// zoneCache maps IPv6 zones (interface names, or numbers) to interface
// indexes and back, so that link-local traffic does not look up
// interfaces per packet.
type zoneCache struct {
	mu    sync.Mutex
	names map[uint32]string
	ids   map[string]uint32
}

func (z *zoneCache) name(id uint32) string {
	z.mu.Lock()
	defer z.mu.Unlock()
	if s, ok := z.names[id]; ok {
		return s
	}
	s := strconv.FormatUint(uint64(id), 10)
	if ifi, err := net.InterfaceByIndex(int(id)); err == nil {
		s = ifi.Name
	}
	if z.names == nil || len(z.names) >= maxZoneCache {
		z.names = make(map[uint32]string)
	}
	z.names[id] = s
	return s
}

func (z *zoneCache) index(zone string) uint32 {
	z.mu.Lock()
	defer z.mu.Unlock()
	if id, ok := z.ids[zone]; ok {
		return id
	}
	var id uint32
	if n, err := strconv.ParseUint(zone, 10, 32); err == nil {
		id = uint32(n)
	} else if ifi, err := net.InterfaceByName(zone); err == nil {
		id = uint32(ifi.Index)
	}
	if z.ids == nil || len(z.ids) >= maxZoneCache {
		z.ids = make(map[string]uint32)
	}
	z.ids[zone] = id
	return id
}

// checkLocal validates a local address and normalizes IPv4-mapped IPv6
// addresses to IPv4.
func checkLocal(laddr netip.Addr) (netip.Addr, error) {
	if !laddr.IsValid() {
		return netip.Addr{}, ErrBadAddr
	}
	return laddr.Unmap(), nil
}
