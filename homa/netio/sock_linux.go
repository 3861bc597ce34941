//go:build linux

package netio

import (
	"encoding/binary"
	"errors"
	"fmt"
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
	// defaultServerReadBuffer is a server socket's receive buffer: the
	// first packets of every client's requests may come at once, and
	// each small datagram costs the kernel a few times its size. With
	// 32 clients of 512 requests each, 8 MiB overflowed (23,000 packets
	// dropped by the kernel, acknowledgments among them); 32 MiB did
	// not. It is a bound, not memory taken: the kernel commits it only
	// for packets waiting to be read.
	defaultServerReadBuffer = 32 << 20
	// fallbackMTU is assumed when the route MTU cannot be found.
	fallbackMTU = 1500
	// maxMTUCache bounds the per-destination MTU cache; when full it is
	// emptied and refilled on demand.
	maxMTUCache = 4096
	// maxZoneCache bounds the IPv6 zone name cache.
	maxZoneCache = 256
)

// sockConn is a raw (IP protocol 146) or UDP Conn on a kernel socket. The
// two differ in a few places, each keyed on udp, ipHdrIn or hdrincl:
// received raw IPv4 packets start with an IP header, and sent ones
// carry one the Conn writes; UDP destinations carry the Homa
// destination port; MaxPacket subtracts the UDP header; only UDP has
// the GSO and GRO offloads.
//
// Its receive side is in sock_read_linux.go and sock_area_linux.go, its
// transmit side in sock_write_linux.go.
type sockConn struct {
	pfd     *pollFD         // the socket
	rc      syscall.RawConn // pfd (tests wrap it)
	laddr   netip.Addr
	port    uint16
	v6      bool
	udp     bool
	ipHdrIn bool        // raw IPv4: received packets start with the IP header
	hdrincl bool        // raw IPv4 with IP_HDRINCL: the Conn writes each packet's IP header (hdrincl_linux.go)
	ttl     uint8       // the TTL of the headers written with hdrincl
	gro     bool        // UDP_GRO is on: datagrams may carry several packets
	mtu     int         // Options.MTU, or 0 to ask the route
	maxLen  int         // the largest packet one datagram carries
	lease   *portLease  // host-wide port reservation (raw only)
	anyPort bool        // a shared socket (rawshare_linux.go): its filter picks the ports, every one is taken
	onClose func()      // run once by Close, after the socket and the port are released; may be nil
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

// errSockClosed is returned by reads of a closed Conn that do not reach
// the socket.
var errSockClosed = fmt.Errorf("netio: read: %w", net.ErrClosed)

// mmsghdr is struct mmsghdr: Go lays it out as C does on every Linux
// architecture (msghdr, then a 32-bit length, padded to msghdr's alignment).
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
}

// newSockConn wraps an open socket, taking it out of the runtime's
// netpoller (see pollFD). It takes ownership of pc and lease and
// releases both, closing pc, even when it fails.
func newSockConn(pc net.PacketConn, laddr netip.Addr, port uint16, udp bool, lease *portLease, opt *Options) (*sockConn, error) {
	if opt == nil {
		opt = &Options{}
	}
	pfd, err := ownSocket(pc)
	if err != nil {
		lease.release()
		return nil, err
	}
	pfd.stayRegistered = opt.ParkOften
	c := &sockConn{pfd: pfd, rc: pfd, laddr: laddr, port: port, lease: lease}
	c.setup(laddr.Is6(), udp, opt)
	if c.rd.errq.on {
		pfd.onErr = func() { c.rd.errq.hint.Store(true) }
	}
	r, w := &c.rd, &c.wr
	rbuf, wbuf := opt.ReadBuffer, opt.WriteBuffer
	if rbuf <= 0 {
		rbuf = defaultSockBuffer
		if port < MinClientPort {
			rbuf = defaultServerReadBuffer
		}
	}
	if wbuf <= 0 {
		wbuf = defaultSockBuffer
	}
	var serr error
	if err := c.rc.Control(func(fd uintptr) {
		setBuffer(int(fd), unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, rbuf)
		setBuffer(int(fd), unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, wbuf)
		if udp && !opt.DisableGSO {
			w.gso.Store(probeGSO(int(fd)))
		}
		if udp && !opt.DisableGRO {
			c.gro = enableGRO(int(fd))
		}
		if c.ipHdrIn {
			c.ttl, c.hdrincl = setHdrincl(int(fd))
		}
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

// ownSocket moves the socket of pc into a pollFD and closes pc.
func ownSocket(pc net.PacketConn) (*pollFD, error) {
	defer pc.Close()
	sc, ok := pc.(syscall.Conn)
	if !ok {
		return nil, errors.New("netio: socket has no raw access")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	return newPollFD(rc)
}

// setup initializes everything of c but the socket.
func (c *sockConn) setup(v6, udp bool, opt *Options) {
	c.v6, c.udp, c.mtu = v6, udp, opt.MTU
	c.ipHdrIn = !v6 && !udp
	c.maxLen = maxDatagram(v6, udp)
	r := &c.rd
	r.wait = func(fd uintptr) bool { return r.recv(fd, true) }
	r.now = func(fd uintptr) { r.recv(fd, false) }
	r.peek, r.sleep = peekReady, time.Sleep
	r.errq.on = opt.ReportUnreachable
	if r.errq.on {
		r.peek = r.errq.pollReady
	}
	w := &c.wr
	w.send = w.sendmmsg
	w.sticky = -1
	w.batch = maxBatch
	w.gsoMax = maxDatagram(v6, true)
	w.errq = &r.errq
	dscp := opt.DSCP
	if dscp == nil {
		dscp = &DefaultDSCP
	}
	for p := range c.tos {
		c.tos[p] = dscp.TOS(uint8(p))
		c.cmsg[p] = tosCmsg(v6, c.tos[p])
	}
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

// LocalAddr implements Conn.
func (c *sockConn) LocalAddr() netip.Addr { return c.laddr }

// Port implements Conn.
func (c *sockConn) Port() uint16 { return c.port }

// Stats implements StatsConn.
func (c *sockConn) Stats() ConnStats {
	s := c.stats.snapshot()
	s.GSO, s.GRO = c.wr.gso.Load(), c.gro
	if c.rc != nil {
		_ = c.rc.Control(func(fd uintptr) { s.QueueDrops = socketDrops(int(fd)) })
	}
	return s
}

// socketDrops is the kernel's count of packets dropped at socket fd
// (SO_MEMINFO's SK_MEMINFO_DROPS: mostly a full receive queue), or 0 if
// the kernel does not say.
func socketDrops(fd int) uint64 {
	var info [unix.SK_MEMINFO_VARS]uint32
	n := uint32(unsafe.Sizeof(info))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_MEMINFO,
		uintptr(unsafe.Pointer(&info[0])), uintptr(unsafe.Pointer(&n)), 0)
	if errno != 0 || n <= unix.SK_MEMINFO_DROPS*4 {
		return 0
	}
	return uint64(info[unix.SK_MEMINFO_DROPS])
}

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
	err := c.pfd.Close()
	if c.lease != nil {
		c.lease.release()
	}
	if c.onClose != nil {
		c.onClose()
	}
	return err
}

// mine reports whether a packet to (or a report of a packet from) Homa
// port p is for this Conn.
func (c *sockConn) mine(p uint16) bool { return p == c.port || c.anyPort }

// mtuCache remembers the route MTU per destination. The entry found
// last is kept at hand, so that the common case (one peer, or a run of
// packets to one) takes no lock.
type mtuCache struct {
	last atomic.Pointer[mtuEntry]
	mu   sync.Mutex
	m    map[netip.Addr]*mtuEntry
}

type mtuEntry struct {
	dst netip.Addr
	mtu int
}

func (mc *mtuCache) get(dst netip.Addr, zones *zoneCache) int {
	if e := mc.last.Load(); e != nil && e.dst == dst {
		return e.mtu
	}
	mc.mu.Lock()
	defer mc.mu.Unlock()
	e, ok := mc.m[dst]
	if !ok {
		mtu, err := routeMTU(dst, zones)
		if err != nil {
			return fallbackMTU // not cached: the route may appear later
		}
		if mc.m == nil || len(mc.m) >= maxMTUCache {
			mc.m = make(map[netip.Addr]*mtuEntry)
		}
		e = &mtuEntry{dst: dst, mtu: mtu}
		mc.m[dst] = e
	}
	mc.last.Store(e)
	return e.mtu
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
