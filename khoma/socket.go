package khoma

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/internal/transport/mailbox"
)

// ErrNoKernelHoma means the running kernel has no Homa module: a Homa
// socket cannot be created (socket(2) with protocol 146 failed with
// EPROTONOSUPPORT or EAFNOSUPPORT), or the platform is not Linux.
var ErrNoKernelHoma = contract.ErrNoKernelHoma

// Tuning.
const (
	// RegionBytes is the size of each socket's receive buffer region:
	// room for 64 messages of the largest size. The memory is reserved,
	// not committed; pages are committed as the kernel fills them.
	RegionBytes = 64 << 20
	// maxReplied bounds the memory of answered requests kept to tell
	// ErrAlreadyReplied from ErrUnknownRPC; when full it is emptied.
	maxReplied = 4096
	// errorBackoff is how long the reader pauses after a recvmsg error
	// that concerns no RPC, so a persistent error does not spin.
	errorBackoff = time.Millisecond
)

// conn is the kernel socket under a Socket: the system calls of one
// Homa socket. The Linux implementation is in sys_linux.go.
type conn interface {
	// region is the receive buffer region registered with the socket.
	region() []byte
	// sendmsg sends data to dst with the arguments a; for a request the
	// kernel writes the new RPC's id into a.ID. It waits while the
	// kernel has no room to queue the message.
	sendmsg(dst netip.AddrPort, a *SendmsgArgs, data []byte) error
	// recvmsg waits for one message or RPC failure and receives it into
	// a, returning its length and sender. Every attempt loads returned
	// bpages with pages.Fill and reports their fate with pages.Settle.
	// A kernel error comes back as a syscall.Errno (with a.ID set when
	// it is the failure of that RPC); a closed socket as contract.ErrClosed.
	recvmsg(a *RecvmsgArgs, pages *Ledger) (n int, peer netip.AddrPort, err error)
	// abort issues HOMAIOCABORT.
	abort(a *AbortArgs) error
	// uapi is the module's user API generation.
	uapi() UAPI
	// info issues HOMAIOCINFO with room for up to maxRPCs RPC records.
	info(maxRPCs int) (Info, error)
	// close closes the socket, waking a recvmsg in progress.
	close() error
	// free unmaps the region, once nothing reads it any more.
	free() error
}

// Socket is a Homa socket of the kernel module with the semantics of
// homa.Endpoint: Send, Recv (any message, or the response of one RPC),
// Reply, Abort. Every method is safe for concurrent use.
//
// The kernel can wait for one RPC's response only if the request was
// sent private, and then no receive of any message sees it; so every
// request is sent shared and one reader goroutine receives every message
// and hands it to the goroutine waiting for it (by RPC id, else the
// oldest Recv(Any)), or queues it. The reader reads only while some Recv
// waits, so unclaimed messages stay in the kernel's buffer region.
type Socket struct {
	c     conn
	local netip.AddrPort
	is4   bool

	mu      sync.Mutex
	closed  bool
	mb      *mailbox.Mailbox     // complete messages and the goroutines waiting for them
	pending map[uint64]clientRPC // client RPCs whose response has not come
	// completed are responses that came before Send recorded their id.
	completed map[uint64]struct{}
	aborted   map[uint64]struct{}    // aborted while the kernel may still answer
	serving   map[serverKey]struct{} // requests received, not answered
	replied   map[serverKey]struct{} // requests answered (bounded)
	waiters   sync.Pool              // *mailbox.Waiter

	wake chan struct{} // a Recv started waiting
	quit chan struct{} // closed by Close
	wg   sync.WaitGroup

	// Owned by the reader goroutine.
	rargs RecvmsgArgs
	pages Ledger

	stats counters
}

// clientRPC is what Abort needs to report an RPC's end to its waiter.
type clientRPC struct {
	peer   netip.AddrPort
	cookie uint64
}

type serverKey struct {
	peer netip.Addr
	id   uint64
}

type counters struct {
	rpcsStarted, rpcsCompleted, requestsReceived atomic.Uint64
	readErrors, writeErrors                      atomic.Uint64
}

// newSocket starts a Socket on an open kernel socket.
func newSocket(c conn, local netip.AddrPort) *Socket {
	s := &Socket{
		c:         c,
		local:     local,
		is4:       local.Addr().Unmap().Is4(),
		mb:        mailbox.New(),
		pending:   make(map[uint64]clientRPC),
		completed: make(map[uint64]struct{}),
		aborted:   make(map[uint64]struct{}),
		serving:   make(map[serverKey]struct{}),
		replied:   make(map[serverKey]struct{}),
		wake:      make(chan struct{}, 1),
		quit:      make(chan struct{}),
	}
	s.wg.Add(1)
	go s.readLoop()
	return s
}

// LocalAddr is the socket's address (as given to Open) and Homa port.
func (s *Socket) LocalAddr() netip.AddrPort { return s.local }

// Send sends a request to dst and returns the new RPC's id; Recv returns
// its response with cookie attached. Send copies data.
func (s *Socket) Send(dst netip.AddrPort, data []byte, cookie uint64) (uint64, error) {
	if err := checkMessage(data); err != nil {
		return 0, err
	}
	dst, err := s.checkPeer(dst)
	if err != nil {
		return 0, err
	}
	if s.isClosed() {
		return 0, contract.ErrClosed
	}
	a := SendmsgArgs{CompletionCookie: cookie}
	if err := s.c.sendmsg(dst, &a, data); err != nil {
		s.stats.writeErrors.Add(1)
		return 0, sendError(err)
	}
	s.started(a.ID, dst, cookie)
	return a.ID, nil
}

// started records the client RPC id that Send started. Its response may
// have come already: the mailbox keeps it.
func (s *Socket) started(id uint64, dst netip.AddrPort, cookie uint64) {
	s.mu.Lock()
	if _, done := s.completed[id]; done {
		delete(s.completed, id) // queued in the mailbox, or taken already
	} else if !s.closed {
		s.mb.Expect(id)
		s.pending[id] = clientRPC{peer: dst, cookie: cookie}
	}
	s.mu.Unlock()
	s.stats.rpcsStarted.Add(1)
}

// Reply sends data as the response to request id from peer. Reply copies
// data.
func (s *Socket) Reply(peer netip.AddrPort, id uint64, data []byte) error {
	if err := checkMessage(data); err != nil {
		return err
	}
	peer, err := s.checkPeer(peer)
	if err != nil {
		return err
	}
	k := serverKey{peer.Addr(), id}
	s.mu.Lock()
	switch _, serving := s.serving[k]; {
	case s.closed:
		err = contract.ErrClosed
	case serving:
		delete(s.serving, k)
		if len(s.replied) >= maxReplied {
			clear(s.replied)
		}
		s.replied[k] = struct{}{}
	default:
		if _, ok := s.replied[k]; ok {
			err = contract.ErrAlreadyReplied
		} else {
			err = contract.ErrUnknownRPC
		}
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	a := SendmsgArgs{ID: id}
	if err := s.c.sendmsg(peer, &a, data); err != nil {
		s.stats.writeErrors.Add(1)
		return sendError(err)
	}
	return nil
}

// Recv waits for the next message: with id 0, any request or response;
// otherwise the response of client RPC id. A failed client RPC comes
// back as a Message with Err set. Recv returns ctx.Err() when ctx ends
// first and contract.ErrClosed when the socket closes.
func (s *Socket) Recv(ctx context.Context, id uint64) (*contract.Message, error) {
	w := s.getWaiter()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.waiters.Put(w)
		return nil, contract.ErrClosed
	}
	m, err := s.mb.Take(id, w)
	waiting := m == nil && err == nil
	s.mu.Unlock()
	if !waiting {
		s.waiters.Put(w)
		return m, err
	}
	select {
	case s.wake <- struct{}{}: // the reader reads while someone waits
	default:
	}
	m, err = s.mb.Await(ctx, &s.mu, w)
	s.waiters.Put(w)
	return m, err
}

func (s *Socket) getWaiter() *mailbox.Waiter {
	if w, _ := s.waiters.Get().(*mailbox.Waiter); w != nil {
		return w
	}
	return mailbox.NewWaiter()
}

// Abort ends the client RPC id. A goroutine waiting in Recv for it gets
// a Message with Err contract.ErrAborted; otherwise the RPC is forgotten and
// no later Recv returns it. The kernel destroys the RPC (HOMAIOCABORT);
// where it refuses (the RPC already ended, or a module built without
// the ioctl), the RPC's end is dropped when recvmsg returns it.
func (s *Socket) Abort(id uint64) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return contract.ErrClosed
	}
	c, inFlight := s.pending[id]
	failure := &contract.Message{ID: id, Peer: c.peer, Cookie: c.cookie,
		Err: &contract.OpError{Op: "abort", Peer: c.peer, ID: id, Err: contract.ErrAborted}}
	if !s.mb.Abort(id, failure) {
		s.mu.Unlock()
		return contract.ErrUnknownRPC
	}
	delete(s.pending, id)
	if !inFlight {
		// The response was here: the kernel is done with the RPC.
		s.mu.Unlock()
		return nil
	}
	s.aborted[id] = struct{}{}
	s.mu.Unlock()

	if err := s.c.abort(&AbortArgs{ID: id}); err == nil {
		// Destroyed: no answer will come.
		s.mu.Lock()
		delete(s.aborted, id)
		s.mu.Unlock()
	}
	// Otherwise the reader drops the RPC's end when it comes.
	return nil
}

// Close closes the socket: goroutines in Recv get contract.ErrClosed, and the
// kernel ends the socket's RPCs. Close is idempotent.
func (s *Socket) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mb.Close()
	clear(s.pending)
	clear(s.serving)
	s.mu.Unlock()
	close(s.quit)
	err := s.c.close()
	s.wg.Wait()
	if ferr := s.c.free(); err == nil {
		err = ferr
	}
	return err
}

// Stats reports the socket's counters. The kernel keeps the protocol's
// own (packets, grants, retransmissions, drops) host-wide in
// /proc/net/homa_metrics, not per socket, so only the RPC counts and the
// read and write errors are counted here; the current state (client and
// server RPCs, incoming bytes granted and outstanding bytes to send)
// comes from HOMAIOCINFO (see Info.fillStats), or, where that fails, the
// RPCs come from this side's own records. The rest is zero (and the maps
// nil).
func (s *Socket) Stats() contract.Stats {
	st := contract.Stats{
		RPCsStarted:      s.stats.rpcsStarted.Load(),
		RPCsCompleted:    s.stats.rpcsCompleted.Load(),
		RequestsReceived: s.stats.requestsReceived.Load(),
		ReadErrors:       s.stats.readErrors.Load(),
		WriteErrors:      s.stats.writeErrors.Load(),
	}
	s.mu.Lock()
	st.ClientRPCs, st.ServerRPCs = s.mb.Expected(), len(s.serving)
	s.mu.Unlock()
	if in, err := s.c.info(maxInfoRPCs); err == nil {
		in.fillStats(&st)
	}
	return st
}

// Info reports the socket's state in the kernel (HOMAIOCINFO), with up to
// maxRPCs of its RPCs (at most 4096). It fails with contract.ErrClosed once
// the socket is closed.
func (s *Socket) Info(maxRPCs int) (Info, error) {
	return s.c.info(maxRPCs)
}

// UAPI is the user API generation of the module the socket runs on.
func (s *Socket) UAPI() UAPI { return s.c.uapi() }

func (s *Socket) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// readLoop receives messages while anyone waits for one.
func (s *Socket) readLoop() {
	defer s.wg.Done()
	for s.awaitDemand() {
		n, peer, err := s.c.recvmsg(&s.rargs, &s.pages)
		if errors.Is(err, contract.ErrClosed) {
			return
		}
		m, ok := s.message(n, peer, err)
		if !ok {
			s.stats.readErrors.Add(1)
			select {
			case <-s.quit:
				return
			case <-time.After(errorBackoff):
			}
			continue
		}
		if m != nil {
			s.dispatch(m)
		}
	}
}

// awaitDemand blocks until some Recv waits, or reports false once the
// socket is closed.
func (s *Socket) awaitDemand() bool {
	for {
		s.mu.Lock()
		closed, demand := s.closed, s.mb.Waiting() > 0
		s.mu.Unlock()
		switch {
		case closed:
			return false
		case demand:
			return true
		}
		select {
		case <-s.wake:
		case <-s.quit:
			return false
		}
	}
}

// message turns the outcome of recvmsg into a Message: the received
// bytes, copied out of the bpages (which are then queued for return), or
// the failure of a client RPC. It returns nil for a failed request, which
// concerns nobody, and ok false for an error of the socket itself.
func (s *Socket) message(n int, peer netip.AddrPort, err error) (m *contract.Message, ok bool) {
	a := &s.rargs
	if err != nil {
		switch {
		case a.ID == 0:
			return nil, false
		case a.ID&1 == 1:
			return nil, true
		}
		return &contract.Message{ID: a.ID, Peer: peer, Cookie: a.CompletionCookie,
			Err: &contract.OpError{Op: "recv", Peer: peer, ID: a.ID, Err: rpcError(err)}}, true
	}
	offs := a.BpageOffsets[:min(int(a.NumBpages), HOMA_MAX_BPAGES)]
	data := make([]byte, n)
	gerr := s.pages.Receive(offs)
	if gerr == nil {
		gerr = Gather(data, s.c.region(), offs, n)
		_ = s.pages.Done(offs) // all were just received
	}
	if gerr != nil {
		if a.ID&1 == 1 {
			return nil, false
		}
		return &contract.Message{ID: a.ID, Peer: peer, Cookie: a.CompletionCookie, Err: gerr}, true
	}
	return &contract.Message{ID: a.ID, Peer: peer, Cookie: a.CompletionCookie, Data: data}, true
}

// dispatch hands a received message to its waiter, or the oldest
// Recv(Any), or queues it (the mailbox's contract).
func (s *Socket) dispatch(m *contract.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if m.IsRequest() {
		s.serving[serverKey{m.Peer.Addr(), m.ID}] = struct{}{}
		s.stats.requestsReceived.Add(1)
	} else {
		if _, ok := s.aborted[m.ID]; ok {
			delete(s.aborted, m.ID)
			m.Release()
			return
		}
		s.stats.rpcsCompleted.Add(1)
		if _, ok := s.pending[m.ID]; ok {
			delete(s.pending, m.ID)
		} else if len(s.completed) < maxReplied {
			// Send has not recorded the id yet.
			s.completed[m.ID] = struct{}{}
		}
	}
	s.mb.Deliver(m, nil)
}

func checkMessage(data []byte) error {
	if len(data) == 0 || len(data) > HOMA_MAX_MESSAGE_LENGTH {
		return contract.ErrMessageTooLong
	}
	return nil
}

// checkPeer checks that the socket can reach dst, and returns it in the
// form of the socket's address family.
func (s *Socket) checkPeer(dst netip.AddrPort) (netip.AddrPort, error) {
	addr := dst.Addr()
	if s.is4 {
		addr = addr.Unmap()
	}
	if dst.Port() == 0 || !addr.IsValid() || addr.Is4() != s.is4 {
		return dst, fmt.Errorf("%w: %v from a %s socket", contract.ErrBadAddress, dst, family(s.is4))
	}
	return netip.AddrPortFrom(addr, dst.Port()), nil
}

func family(is4 bool) string {
	if is4 {
		return "IPv4"
	}
	return "IPv6"
}
