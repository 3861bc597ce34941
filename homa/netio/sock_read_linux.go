//go:build linux

package netio

import (
	"net/netip"
	"os"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsgs is a reusable recvmmsg argument block. Its callbacks are bound
// once, so a syscall through syscall.RawConn does not allocate. Slot i
// uses iovecs 4i to 4i+3: the raw IPv4 header scratch (raw IPv4 only),
// then Buf, or for a landing read Buf[:LandAt], Land and Buf[LandAt:]
// (see prepareRead).
type mmsgs struct {
	hs    [maxBatch]mmsghdr
	keys  [maxBatch]slotKey // what prepareRead set each slot up for (zero: nothing)
	iov   [4 * maxBatch]unix.Iovec
	quote [maxBatch]unix.Iovec            // each slot's whole buffer, where an error-queue message goes
	names [maxBatch]unix.RawSockaddrInet6 // large enough for either family
	cnt   int                             // messages prepared
	done  int                             // messages received
	last  int                             // bytes the last call received
	errno unix.Errno                      // error of the last syscall, 0 if none
}

// readState is the receive side; mu admits one reader at a time. A
// batch holds error-queue messages in slots [0, errq.n), then datagrams
// in the next done slots. It reads into the caller's buffers (direct)
// or into its own area (GRO, borrowed reads; see rxArea).
type readState struct {
	mu sync.Mutex
	mmsgs
	iphdr [maxBatch][ipv4HeaderLen]byte // raw IPv4 header scratch
	wait  func(fd uintptr) bool         // recv, parking when nothing is ready
	now   func(fd uintptr)              // recv, returning when nothing is ready
	peek  func(fd uintptr) bool         // true when a packet (or an error) is queued
	sleep func(time.Duration)           // time.Sleep; tests replace it
	errq  errQueue
	area  rxArea
}

// recvmmsg receives into the prepared messages from slot from on,
// without waiting. It is a raw system call, which the scheduler does not
// hear of: a goroutine spinning on the socket makes one every microsecond
// or so, and telling the scheduler of each (entering and leaving a
// system call) started an idle processor of the process every 27 µs or
// so in traces of homa serve (2,100 starts in 200 1 MB echoes; 290 with
// raw calls), each a thread competing with the spinners for the CPUs. It
// never blocks, so the scheduler needs not know; but see socketCall.
func (m *mmsgs) recvmmsg(fd uintptr, from int) {
	for {
		r, _, e := socketCall(m.last, unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&m.hs[from])), uintptr(m.cnt-from), unix.MSG_DONTWAIT)
		if e == unix.EINTR {
			continue
		}
		m.errno = e
		m.last = 0
		if e == 0 {
			m.done = int(r)
			for i := from; i < from+m.done; i++ {
				m.last += int(m.hs[i].len)
			}
		}
		return
	}
}

// recv is one receive step, run by a wait (wait: returning false parks
// the reader until the socket is ready) or once (TryReadBatch). It
// reads the error queue first when hinted to (into at most half the batch,
// so that a stream of errors cannot starve datagrams), then datagrams. A
// receive that fails with the socket's pending ICMP error sends it to the
// error queue, then it tries the datagrams once more. A reader that
// parks leaves no report behind: a socket with a pending error or a
// queued report is ready to epoll (EPOLLERR), so the reader wakes at
// once, and the wait that sees EPOLLERR sets the hint (pollFD.onErr).
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

// rawCallMax bounds the bytes a raw socket call may move (see
// socketCall): about 30 µs of copying.
const rawCallMax = 256 << 10

// socketCall makes a socket system call that never blocks and moves
// about bytes (for a receive, as many as the last one did): raw, which
// the scheduler does not hear of, unless bytes is large. A raw call
// holds its processor without the scheduler knowing, so that a garbage
// collection's stop-the-world waits for it: a batch of maxBatch
// datagrams of 64 KB is a few hundred microseconds of copying, long
// enough to tell the scheduler, and long enough that telling it costs
// nothing that matters.
func socketCall(bytes int, trap, a1, a2, a3, a4 uintptr) (uintptr, uintptr, unix.Errno) {
	if bytes > rawCallMax {
		return unix.Syscall6(trap, a1, a2, a3, a4, 0, 0)
	}
	return unix.RawSyscall6(trap, a1, a2, a3, a4, 0, 0)
}

// peekReady reports whether a packet waits in the socket's queue, without
// taking it. Errors count as ready: the next read reports them.
func peekReady(fd uintptr) bool {
	var b [1]byte
	_, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1, unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
	return e != unix.EAGAIN
}

// slotKey names the buffers a slot of the batch receives into. It is
// four words, which the compiler compares inline: with a fifth field (a
// bool) comparing keys took a call, and an empty read 615 ns.
type slotKey struct {
	buf, land   *byte
	nbuf, nland int
}

// clear drops the references to caller buffers held in the first n slots.
func (m *mmsgs) clear(n int) {
	clear(m.keys[:n])
	for i := range n {
		m.hs[i].hdr.Iov = nil
		m.hs[i].hdr.Control = nil
	}
	for i := range 4 * n {
		m.iov[i].Base = nil
	}
	for i := range n {
		m.quote[i].Base = nil
	}
}

// ReadBatch implements Conn.
func (c *sockConn) ReadBatch(pkts []Packet) (int, error) { return c.read(pkts, true, false) }

// TryReadBatch implements Poller. It also returns 0, nil when another
// goroutine is inside a read. It does not wait for the descriptor's read
// lock, so it runs while another goroutine is parked in WaitReadable.
func (c *sockConn) TryReadBatch(pkts []Packet) (int, error) { return c.read(pkts, false, false) }

// Lands implements Lander: reads straight into the caller's Bufs land;
// those through the receive area (GRO on, and borrowed reads) do not. A
// Conn with GRO is read borrowed, where landing is moot.
func (c *sockConn) Lands() bool { return !c.gro }

// ReadBorrowed implements BorrowReader: the packets stay in the Conn's
// receive area (see rxArea).
func (c *sockConn) ReadBorrowed(pkts []Packet) (int, error) { return c.read(pkts, true, true) }

// TryReadBorrowed implements BorrowReader.
func (c *sockConn) TryReadBorrowed(pkts []Packet) (int, error) { return c.read(pkts, false, true) }

// WaitReadable implements Poller: it parks (see pollFD) until a packet
// (or, with reports on, an error) is queued, and leaves it there. It
// returns at once while packets of an earlier receive wait in the Conn's
// receive area.
func (c *sockConn) WaitReadable() error {
	if c.closed.Load() {
		return errSockClosed
	}
	if c.rd.area.pending.Load() {
		return nil
	}
	return c.waitReadable()
}

// Queued implements Queued: packets of an earlier receive wait in the
// Conn's receive area, or a datagram on the socket.
func (c *sockConn) Queued() bool {
	return !c.closed.Load() && (c.rd.area.pending.Load() || c.pfd.readable())
}

// read is every read method: wait parks until something arrives, borrow
// lends the receive area's packets instead of copying them. Packets left
// in the area by an earlier receive go first, without a system call.
// GRO and borrowed reads receive into the area; other reads straight
// into the caller's Bufs.
func (c *sockConn) read(pkts []Packet, wait, borrow bool) (int, error) {
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
	if c.closed.Load() {
		r.clear(maxBatch) // let go of the caller's buffers
		return 0, errSockClosed
	}
	if !borrow {
		for i := range pkts {
			if len(pkts[i].Buf) == 0 {
				return 0, ErrBadPacket
			}
		}
	}
	if r.area.pending.Load() {
		if n := c.handOut(pkts, borrow); n > 0 {
			return n, nil
		}
	}
	area := borrow || c.gro
	if !area {
		pkts = pkts[:min(len(pkts), maxBatch)]
	}
	var retry time.Duration // nonzero while the reader cannot park
	for {
		if area {
			c.prepareArea(min(len(pkts), areaSlots))
		} else {
			c.prepareRead(pkts)
		}
		var err error
		if wait {
			if c.wake.take() {
				_ = c.pfd.SetReadDeadline(time.Time{})
				return 0, ErrWoken
			}
			err = c.rc.Read(r.wait)
			var again bool
			if err, again = c.woken(err); again {
				continue
			}
			if err == ErrWoken {
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
		if err != nil {
			return 0, err
		}
		if r.errno != 0 && r.errno != unix.EAGAIN && r.errq.n == 0 {
			return 0, os.NewSyscallError("recvmmsg", r.errno)
		}
		if r.done > 0 {
			c.stats.recvCalls.Add(1)
			c.stats.recvDatagrams.Add(uint64(r.done))
		}
		var n int
		if area {
			c.landed()
			n = c.handOut(pkts, borrow)
		} else {
			n = c.collect(pkts)
		}
		if n > 0 || !wait {
			return n, nil
		}
		if retry > 0 {
			r.sleep(retry)
		}
	}
}

// prepareRead sets the batch up to receive into the Bufs of pkts, none
// of them empty: each datagram into its Buf, or, for a packet that lands
// (see Packet.Land), its first LandAt bytes into Buf, then Land, then the
// rest of Buf. A raw IPv4 header goes to a scratch buffer before them.
//
// A slot already set up for the same Buf and Land keeps its iovecs: a
// reader spinning on an empty socket offers the same buffers read after
// read, and setting up 64 slots (and clearing them after) took three
// quarters of an empty read (530 of 710 ns). So the slots keep pointing
// at the caller's buffers between reads, until the next read with other
// buffers, or one after Close.
func (c *sockConn) prepareRead(pkts []Packet) {
	r := &c.rd
	for i := range pkts {
		p := &pkts[i]
		h := &r.hs[i]
		key := slotKey{buf: unsafe.SliceData(p.Buf), nbuf: len(p.Buf)}
		if p.lands() {
			key.land, key.nland = unsafe.SliceData(p.Land), len(p.Land)
		}
		if r.keys[i] == key {
			// Only what the kernel wrote back.
			h.len = 0
			h.hdr.Namelen = unix.SizeofSockaddrInet6
			h.hdr.Flags = 0
			continue
		}
		r.keys[i] = key
		iov := r.iov[4*i : 4*i+4]
		k := 0
		if c.ipHdrIn {
			iov[0].Base = &r.iphdr[i][0]
			iov[0].SetLen(ipv4HeaderLen)
			k = 1
		}
		if p.lands() {
			setIov(&iov[k], p.Buf[:LandAt])
			setIov(&iov[k+1], p.Land)
			setIov(&iov[k+2], p.Buf[LandAt:])
			k += 3
		} else {
			setIov(&iov[k], p.Buf)
			k++
		}
		setIov(&r.quote[i], p.Buf)
		h.len = 0
		h.hdr = unix.Msghdr{
			Name:    (*byte)(unsafe.Pointer(&r.names[i])),
			Namelen: unix.SizeofSockaddrInet6,
			Iov:     &iov[0],
		}
		h.hdr.SetIovlen(k)
	}
	r.cnt, r.done, r.errno = len(pkts), 0, 0
}

// setIov points v at b, which is not empty.
func setIov(v *unix.Iovec, b []byte) {
	v.Base = &b[0]
	v.SetLen(len(b))
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
		pkts[i].Payload, pkts[i].Landed = nil, 0
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
		land := p.lands()
		if c.ipHdrIn {
			if land && ok && n > ipv4HeaderLen+LandAt && r.iphdr[i][0]&0x0f > ipv4HeaderLen/4 {
				// IP options came first and pushed the packet along:
				// its header is not where LandAt expected it. Put the
				// datagram back together in Buf, where stripIPv4 moves
				// the packet down over the options; one that does not
				// fit there is discarded like a truncated one.
				p.split(n - ipv4HeaderLen)
				ok, land = p.gather(), false
			}
			n, ok = stripIPv4(r.iphdr[i][:], p.Buf, n, ok)
		}
		if !ok || n < homaHeaderLen || !c.mine(dstPort(p.Buf)) {
			c.stats.discarded.Add(1)
			continue
		}
		if land {
			p.split(n)
		} else {
			p.N, p.Landed = n, 0
		}
		p.Payload = nil
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
// options, rare, spill into buf and are moved out of the way. A landing
// read must have gathered the datagram into buf first.
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
