package khoma

import (
	"fmt"
	"net/netip"
	"sync"
	"syscall"

	"github.com/homa-go/homa/contract"
)

// fakeHost stands in for a kernel with the Homa module: it connects the
// fakeConns opened on it by port, numbers RPCs, stores incoming messages
// in each socket's region in bpages, and checks that every bpage it hands
// out comes back exactly once.
type fakeHost struct {
	mu     sync.Mutex
	conns  map[uint16]*fakeConn
	nextID uint64
	next   uint16 // next client port
	errs   []string
	// fail is the errno with which the module fails requests to these
	// destinations (as its ICMP handlers and timer would); a request to
	// a port without a server socket fails with ENOTCONN.
	fail map[netip.AddrPort]syscall.Errno
	// noRoute is the errno of sendmsg to these hosts (the route lookup
	// failed as the module created the peer).
	noRoute map[netip.Addr]syscall.Errno
}

func newFakeHost() *fakeHost {
	return &fakeHost{conns: make(map[uint16]*fakeConn), nextID: 100, next: HOMA_MIN_DEFAULT_PORT}
}

// fakeMsg is a message waiting in a fakeConn to be received.
type fakeMsg struct {
	id     uint64
	cookie uint64
	peer   netip.AddrPort
	data   []byte
	errno  syscall.Errno // the RPC failed (data nil)
	bad    bool          // hand out bpages that do not fit the message
}

type fakeConn struct {
	h         *fakeHost
	addr      netip.AddrPort
	server    bool
	buf       []byte
	freePages []int             // free bpage indexes
	out       map[int]bool      // bpages handed to the application
	queue     []*fakeMsg        // messages ready to receive
	clients   map[uint64]uint64 // client RPC id -> cookie
	serving   map[serverKey]bool
	notify    chan struct{}
	closed    chan struct{}
	freed     bool
	calls     int // recvmsg attempts
	// failEvery makes every failEvery-th recvmsg attempt fail with
	// EFAULT before it looks at the arguments (0: never).
	failEvery int
	// infoRPCs, when set, are the RPCs HOMAIOCINFO reports instead of
	// those the host knows; infoErr makes it fail.
	infoRPCs []RPCInfo
	infoErr  error
}

// open opens a socket on the host; port 0 assigns a client port.
func (h *fakeHost) open(port uint16, pages int) *fakeConn {
	h.mu.Lock()
	defer h.mu.Unlock()
	if port == 0 {
		port = h.next
		h.next++
	}
	c := &fakeConn{
		h:       h,
		addr:    netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port),
		server:  port < HOMA_MIN_DEFAULT_PORT,
		buf:     make([]byte, pages*HOMA_BPAGE_SIZE),
		out:     make(map[int]bool),
		clients: make(map[uint64]uint64),
		serving: make(map[serverKey]bool),
		notify:  make(chan struct{}, 1),
		closed:  make(chan struct{}),
	}
	for i := range pages {
		c.freePages = append(c.freePages, i)
	}
	h.conns[port] = c
	return c
}

// socket opens a fakeConn and a Socket on it.
func (h *fakeHost) socket(port uint16) (*Socket, *fakeConn) {
	c := h.open(port, 64)
	return newSocket(c, c.addr), c
}

func (h *fakeHost) errorf(format string, args ...any) {
	h.errs = append(h.errs, fmt.Sprintf(format, args...))
}

// errors returns what the host found wrong.
func (h *fakeHost) errors() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.errs...)
}

// deliver queues m for c. Called with h.mu held.
func (c *fakeConn) deliver(m *fakeMsg) {
	c.queue = append(c.queue, m)
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

func (c *fakeConn) region() []byte { return c.buf }

func (c *fakeConn) sendmsg(dst netip.AddrPort, a *SendmsgArgs, data []byte) error {
	h := c.h
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-c.closed:
		return syscall.ESHUTDOWN
	default:
	}
	if a.Reserved != 0 || a.Flags != 0 {
		return syscall.EINVAL
	}
	if errno := h.noRoute[dst.Addr()]; errno != 0 {
		return errno
	}
	if a.ID == 0 {
		h.nextID += 2
		a.ID = h.nextID
		c.clients[a.ID] = a.CompletionCookie
		peer := h.conns[dst.Port()]
		errno := h.fail[dst]
		if errno == 0 && (peer == nil || !peer.server) {
			errno = syscall.ENOTCONN
		}
		if errno != 0 {
			c.deliver(&fakeMsg{id: a.ID, cookie: a.CompletionCookie, peer: dst, errno: errno})
			return nil
		}
		peer.serving[serverKey{c.addr.Addr(), a.ID + 1}] = true
		peer.deliver(&fakeMsg{id: a.ID + 1, peer: c.addr, data: append([]byte(nil), data...)})
		return nil
	}
	k := serverKey{dst.Addr(), a.ID}
	if !c.serving[k] {
		return nil // the kernel ignores answers to unknown RPCs
	}
	delete(c.serving, k)
	client := h.conns[dst.Port()]
	if client == nil {
		return nil
	}
	cookie, ok := client.clients[a.ID-1]
	if !ok {
		return nil // aborted
	}
	client.deliver(&fakeMsg{id: a.ID - 1, cookie: cookie, peer: c.addr, data: append([]byte(nil), data...)})
	return nil
}

func (c *fakeConn) recvmsg(a *RecvmsgArgs, pages *Ledger) (int, netip.AddrPort, error) {
	for {
		sent := pages.Fill(a)
		n, peer, errno := c.attempt(a)
		pages.Settle(Taken(sent, n, errno, a))
		if errno != syscall.EAGAIN {
			if errno != 0 {
				return -1, peer, errno
			}
			return n, peer, nil
		}
		select {
		case <-c.notify:
		case <-c.closed:
			return 0, netip.AddrPort{}, fmt.Errorf("%w: fake socket", contract.ErrClosed)
		}
	}
}

// attempt is one recvmsg system call.
func (c *fakeConn) attempt(a *RecvmsgArgs) (int, netip.AddrPort, syscall.Errno) {
	h := c.h
	h.mu.Lock()
	defer h.mu.Unlock()
	c.calls++
	if c.failEvery > 0 && c.calls%c.failEvery == 0 {
		return -1, netip.AddrPort{}, syscall.EFAULT // arguments untouched
	}
	if c.freed {
		h.errorf("recvmsg after the region was unmapped")
	}
	if a.NumBpages > HOMA_MAX_BPAGES {
		h.errorf("recvmsg returns %d bpages, more than %d", a.NumBpages, HOMA_MAX_BPAGES)
		return -1, netip.AddrPort{}, syscall.EINVAL
	}
	for _, off := range a.BpageOffsets[:a.NumBpages] {
		i := int(off >> HOMA_BPAGE_SHIFT)
		if !c.out[i] {
			h.errorf("port %d: bpage %d (offset %#x) returned but not handed out", c.addr.Port(), i, off)
			continue
		}
		delete(c.out, i)
		c.freePages = append(c.freePages, i)
	}
	a.NumBpages = 0
	if len(c.queue) == 0 {
		return -1, netip.AddrPort{}, syscall.EAGAIN
	}
	m := c.queue[0]
	c.queue = c.queue[1:]
	if m.id&1 == 0 {
		delete(c.clients, m.id)
	}
	a.ID, a.CompletionCookie = m.id, m.cookie
	if m.errno != 0 {
		return -1, m.peer, m.errno
	}
	c.store(a, m)
	return len(m.data), m.peer, 0
}

// store writes m into free bpages and describes them in a. The last
// bpage's fragment sits at the end of its page, so its offset is
// unaligned unless the fragment fills the page.
func (c *fakeConn) store(a *RecvmsgArgs, m *fakeMsg) {
	k := MessageBpages(len(m.data))
	if k > len(c.freePages) {
		c.h.errorf("port %d: receive region full", c.addr.Port())
		return
	}
	for j := range k {
		i := c.freePages[len(c.freePages)-1]
		c.freePages = c.freePages[:len(c.freePages)-1]
		c.out[i] = true
		chunk := m.data[j*HOMA_BPAGE_SIZE : min(len(m.data), (j+1)*HOMA_BPAGE_SIZE)]
		off := i * HOMA_BPAGE_SIZE
		if j == k-1 {
			off += HOMA_BPAGE_SIZE - len(chunk)
		}
		copy(c.buf[off:], chunk)
		a.BpageOffsets[j] = uint32(off)
	}
	a.NumBpages = uint32(k)
	if m.bad && k > 0 {
		a.BpageOffsets[0] = uint32(len(c.buf)) // beyond the region
	}
}

func (c *fakeConn) abort(a *AbortArgs) error {
	h := c.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := c.clients[a.ID]; !ok {
		return syscall.EINVAL
	}
	delete(c.clients, a.ID)
	for i, m := range c.queue {
		if m.id == a.ID {
			c.queue = append(c.queue[:i], c.queue[i+1:]...)
			break
		}
	}
	return nil
}

func (c *fakeConn) uapi() UAPI { return UAPI617 }

// info reports the socket's RPCs as the module would: its client RPCs
// waiting for a response and its server RPCs not yet answered.
func (c *fakeConn) info(maxRPCs int) (Info, error) {
	h := c.h
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-c.closed:
		return Info{}, fmt.Errorf("%w: fake socket", contract.ErrClosed)
	default:
	}
	if c.infoErr != nil {
		return Info{}, c.infoErr
	}
	rpcs := c.infoRPCs
	if rpcs == nil {
		for id, cookie := range c.clients {
			rpcs = append(rpcs, RPCInfo{ID: id, Cookie: cookie, TxLength: 1, TxSent: 1, RxLength: -1})
		}
		for k := range c.serving {
			rpcs = append(rpcs, RPCInfo{ID: k.id, Peer: netip.AddrPortFrom(k.peer, 1), TxLength: -1})
		}
	}
	in := Info{UAPI: UAPI617, Port: c.addr.Port(), NumRPCs: len(rpcs), AvailBytes: uint64(len(c.freePages) * HOMA_BPAGE_SIZE)}
	in.RPCs = rpcs[:min(len(rpcs), maxRPCs)]
	return in, nil
}

func (c *fakeConn) close() error {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	select {
	case <-c.closed:
	default:
		close(c.closed)
		delete(c.h.conns, c.addr.Port())
	}
	return nil
}

func (c *fakeConn) free() error {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	c.freed = true
	return nil
}

// outstanding is the number of bpages the application has not returned.
func (c *fakeConn) outstanding() int {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	return len(c.out)
}

// queued is the number of messages waiting to be received.
func (c *fakeConn) queued() int {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	return len(c.queue)
}
