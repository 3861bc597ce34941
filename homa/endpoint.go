// Package homa is the Homa transport engine: an Endpoint owns one Homa port
// on a netio.Conn and runs the RPC state machines of the clients and
// servers behind it.
//
// Locking: one mutex per endpoint guards every RPC, peer and queue. The
// receive goroutine takes it once per batch of packets; application
// goroutines take it in Send, Reply, Recv and Abort. Packets are built
// under the mutex and written after it is released.
package homa

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/homa-go/homa/ack"
	"github.com/homa-go/homa/grant"
	"github.com/homa-go/homa/homa/netio"
	"github.com/homa-go/homa/homa/wire"
	"github.com/homa-go/homa/pacer"
	"github.com/homa-go/homa/priority"
	"github.com/homa-go/homa/resend"
)

// rxBatch is how many packets one read takes at most.
const rxBatch = 16

type rpcState uint8

const (
	// stateActive: a client RPC whose response is incomplete, or a server
	// RPC whose request is incomplete.
	stateActive rpcState = iota
	// stateServing: a server RPC whose request went to the application.
	stateServing
	// stateReplying: a server RPC sending (or holding, until it is
	// acknowledged) its response.
	stateReplying
	// stateDone: a client RPC whose response waits to be received.
	stateDone
)

// rpc is one RPC, client or server side.
type rpc struct {
	id     uint64 // local id: even on the client, odd on the server
	peer   *peer
	port   uint16 // the peer's Homa port
	cookie uint64
	state  rpcState
	out    outMsg // client: request; server: response
	in     inMsg  // client: response; server: request
	inInit bool   // in has seen its first DATA packet
	msg    *Message
	waiter *waiter       // client: a goroutine in Recv for this id
	start  time.Duration // client: when Send started it (counters.since)

	rs  resend.Tracker // loss detection while data is owed to us
	ak  ack.Pending    // server: the answered RPC awaits its acknowledgment
	gid grant.ID       // the incoming message's handle in the grant scheduler (0: none)
	pid pacer.ID       // the outgoing message's handle in the pacer (0: none)
}

func (r *rpc) isClient() bool { return r.id&1 == 0 }

// RPC state is recycled: an rpc lives exactly as long as its entry in the
// endpoint's tables, and nothing outside the mutex keeps a pointer to it
// (Recv holds one across a wait, but only compares its waiter, which
// cannot have been reused meanwhile).
var rpcPool = sync.Pool{New: func() any { return new(rpc) }}

func newRPC() *rpc { return rpcPool.Get().(*rpc) }

// freeRPC recycles r, which is in no table any more, with its buffers.
func freeRPC(r *rpc) {
	r.out.release()
	r.in.release()
	*r = rpc{}
	rpcPool.Put(r)
}

type serverKey struct {
	addr netip.Addr
	id   uint64
}

// Endpoint is a Homa endpoint bound to one port. It is safe for concurrent
// use by many goroutines.
type Endpoint struct {
	conn netio.Conn
	cfg  Config
	port uint16
	is4  bool
	ids  *idSource

	mu      sync.Mutex
	closed  bool
	clients map[uint64]*rpc
	servers map[serverKey]*rpc
	peers   map[netip.Addr]*peer
	seen    map[clientKey]*ack.Seen // finished request ids per client port
	// solicited are request ids below a Seen floor whose client asked
	// for the response: see stale.
	solicited map[serverKey]uint64
	now       uint64 // timer ticks since start
	// deadPeers and nominated are scratch for tick.
	deadPeers, nominated []*peer

	// sched decides the GRANTs for incoming messages; granting maps its
	// handles back to RPCs.
	sched    *grant.Scheduler
	granting map[grant.ID]*rpc
	lastGID  grant.ID
	grants   []grant.Grant // scratch for Decide

	// pacer orders and throttles outgoing DATA when Config.LinkMbps is
	// set (nil otherwise); pacing maps its handles back to RPCs;
	// pacerWake and the pacer goroutine send what the budget held back.
	pacer     *pacer.Pacer
	pacing    map[pacer.ID]*rpc
	lastPID   pacer.ID
	pacerWake chan struct{}

	// est learns our unscheduled cutoffs from incoming traffic; cutoffs
	// and schedLevels are its current answer, refreshed every tick.
	est         *priority.Estimator
	cutoffs     priority.Cutoffs
	schedLevels int
	ready       dlist[Message, *Message]
	anyWait     dlist[waiter, *waiter] // goroutines in Recv(any), oldest first

	// rxPkt is where handle decodes a packet; guarded by mu.
	rxPkt wire.Packet
	// rxSelf is the waiter of the goroutine now processing packets, if
	// it polls from Recv; messages for any waiter go to it first.
	rxSelf *waiter

	// Receiving. Whoever holds rxTok reads the Conn (into rxPkts): a
	// goroutine in Recv that polls, or else the background reader.
	poller     netio.Poller // nil when the Conn cannot be polled or polling is off
	rxTok      sync.Mutex
	rxPkts     []netio.Packet
	appPolling atomic.Bool   // an application goroutine holds rxTok
	pollIdle   chan struct{} // signalled when appPolling turns false

	stats   counters
	batches sync.Pool // *txBatch
	waiters sync.Pool // *waiter
	done    chan struct{}
	wg      sync.WaitGroup
}

// NewEndpoint starts an endpoint on conn, which it owns from now on (Close
// closes it).
func NewEndpoint(conn netio.Conn, cfg Config) *Endpoint {
	e := &Endpoint{
		conn:      conn,
		cfg:       cfg.withDefaults(),
		port:      conn.Port(),
		is4:       conn.LocalAddr().Unmap().Is4(),
		clients:   make(map[uint64]*rpc),
		servers:   make(map[serverKey]*rpc),
		peers:     make(map[netip.Addr]*peer),
		seen:      make(map[clientKey]*ack.Seen),
		granting:  make(map[grant.ID]*rpc),
		solicited: make(map[serverKey]uint64),
		done:      make(chan struct{}),
		pollIdle:  make(chan struct{}, 1),
		rxPkts:    make([]netio.Packet, rxBatch),
	}
	if p, ok := conn.(netio.Poller); ok && e.cfg.PollDuration > 0 {
		e.poller = p
	}
	e.sched = grant.New(e.cfg.Grant)
	if e.cfg.LinkMbps > 0 {
		e.pacer = pacer.New(pacer.Config{RateMbps: e.cfg.LinkMbps})
		e.pacing = make(map[pacer.ID]*rpc)
		e.pacerWake = make(chan struct{}, 1)
	}
	e.est = priority.NewEstimator(e.cfg.Cutoffs)
	e.cutoffs, e.schedLevels = e.est.Cutoffs()
	e.ids = newIDSource(e.port, time.Now())
	e.stats.init()
	e.wg.Add(2)
	go e.rxLoop()
	go e.timerLoop()
	if e.pacer != nil {
		e.wg.Add(1)
		go e.pacerLoop()
	}
	return e
}

// Port is the endpoint's Homa port.
func (e *Endpoint) Port() uint16 { return e.port }

// LocalAddr is the endpoint's address and port.
func (e *Endpoint) LocalAddr() netip.AddrPort {
	return netip.AddrPortFrom(e.conn.LocalAddr(), e.port)
}

// Send starts a client RPC: it sends the request data to dst and returns
// the RPC's id. The response arrives through Recv, with cookie attached.
// Send copies data; the caller may reuse it at once.
func (e *Endpoint) Send(dst netip.AddrPort, data []byte, cookie uint64) (uint64, error) {
	if err := e.checkMessage(data); err != nil {
		return 0, err
	}
	addr := dst.Addr()
	if e.is4 {
		addr = addr.Unmap()
	}
	if dst.Port() == 0 || addr.Is4() != e.is4 {
		return 0, ErrBadAddress
	}
	buf := getBuf(len(data))
	copy(buf, data)
	b := e.getBatch()
	start := e.stats.since()
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		putBuf(buf)
		e.sendBatch(b)
		return 0, ErrClosed
	}
	r := newRPC()
	r.id = e.ids.newID()
	r.start = start
	r.peer = e.peerFor(addr)
	r.port = dst.Port()
	r.cookie = cookie
	r.out.init(buf, e.cfg.UnschedBytes)
	r.rs.Start(e.now)
	e.clients[r.id] = r
	e.sendMore(r, b)
	id := r.id
	e.mu.Unlock()
	e.sendBatch(b)
	e.stats.rpcsStarted.Add(1)
	e.stats.hist.message(Sent, Request, len(data))
	return id, nil
}

// Reply sends the response to the request with the given id from the
// client at peer. Reply copies data.
func (e *Endpoint) Reply(peer netip.Addr, id uint64, data []byte) error {
	if err := e.checkMessage(data); err != nil {
		return err
	}
	if e.is4 {
		peer = peer.Unmap()
	}
	buf := getBuf(len(data))
	copy(buf, data)
	b := e.getBatch()
	e.mu.Lock()
	err := e.reply(peer, id, buf, b)
	e.mu.Unlock()
	if err != nil {
		putBuf(buf)
	} else {
		e.stats.hist.message(Sent, Response, len(data))
	}
	e.sendBatch(b)
	return err
}

func (e *Endpoint) reply(peer netip.Addr, id uint64, buf []byte, b *txBatch) error {
	if e.closed {
		return ErrClosed
	}
	r := e.servers[serverKey{peer, id}]
	switch {
	case r == nil:
		return ErrUnknownRPC
	case r.state != stateServing:
		return ErrAlreadyReplied
	}
	r.state = stateReplying
	r.ak.Start(e.now)
	r.out.init(buf, e.cfg.UnschedBytes)
	e.sendMore(r, b)
	return nil
}

func (e *Endpoint) checkMessage(data []byte) error {
	if len(data) == 0 || len(data) > MaxMessage {
		return ErrMessageTooLong
	}
	return nil
}

// Recv returns the next complete message: with id 0, any request or
// response; otherwise the response of the client RPC id. It blocks until
// one is ready, ctx is done, or the endpoint closes. A failed client RPC
// is returned as a Message with Err set.
func (e *Endpoint) Recv(ctx context.Context, id uint64) (*Message, error) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	var r *rpc
	if id == 0 {
		if m := e.ready.head; m != nil {
			e.take(m)
			e.mu.Unlock()
			return m, nil
		}
	} else {
		r = e.clients[id]
		switch {
		case r == nil:
			e.mu.Unlock()
			return nil, ErrUnknownRPC
		case r.msg != nil:
			m := r.msg
			e.take(m)
			e.mu.Unlock()
			return m, nil
		case r.waiter != nil:
			e.mu.Unlock()
			return nil, ErrAlreadyWaiting
		}
	}
	w := e.getWaiter()
	if r != nil {
		r.waiter = w
	} else {
		e.anyWait.push(w)
	}
	e.mu.Unlock()

	if m, ok := e.poll(ctx, w); ok {
		e.putWaiter(w)
		if m == nil {
			return nil, ErrClosed
		}
		return m, nil
	}
	select {
	case m := <-w.ch:
		e.putWaiter(w)
		if m == nil {
			return nil, ErrClosed
		}
		return m, nil
	case <-ctx.Done():
	}
	e.mu.Lock()
	registered := false
	if r != nil && r.waiter == w {
		r.waiter, registered = nil, true
	} else if r == nil && w.link.listed {
		e.anyWait.remove(w)
		registered = true
	}
	e.mu.Unlock()
	if !registered {
		// A message was handed over as the context ended: keep it.
		m := <-w.ch
		e.putWaiter(w)
		if m == nil {
			return nil, ErrClosed
		}
		return m, nil
	}
	e.putWaiter(w)
	return nil, ctx.Err()
}

// take removes a ready message from the queue, and for a response, the
// client RPC it completes.
func (e *Endpoint) take(m *Message) {
	e.ready.remove(m)
	if !m.IsRequest() {
		e.forgetClient(m.ID)
	}
}

// forgetClient removes a finished client RPC and recycles its state.
func (e *Endpoint) forgetClient(id uint64) {
	if r := e.clients[id]; r != nil {
		delete(e.clients, id)
		freeRPC(r)
	}
}

// Abort ends the client RPC id. A goroutine waiting in Recv for this id
// receives a Message with Err ErrAborted; otherwise the RPC is simply
// forgotten (the caller knows), and no later Recv sees it. The server is
// not told.
func (e *Endpoint) Abort(id uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrClosed
	}
	r := e.clients[id]
	if r == nil {
		return ErrUnknownRPC
	}
	e.stats.rpcsAborted.Add(1)
	if r.waiter != nil {
		e.fail(r, ErrAborted)
		return nil
	}
	if r.msg != nil {
		e.ready.remove(r.msg)
		r.msg.Release()
	}
	e.unschedule(r)
	e.unpace(r)
	e.forgetClient(id)
	return nil
}

// fail ends a client RPC with err, handing the failure to its waiter or
// the ready queue (a response already waiting is dropped).
func (e *Endpoint) fail(r *rpc, err error) {
	if r.msg != nil {
		e.ready.remove(r.msg)
		r.msg.Release()
	}
	e.unschedule(r)
	e.unpace(r)
	r.out.release()
	r.in.release()
	m := &Message{ID: r.id, Peer: netip.AddrPortFrom(r.peer.addr, r.port), Cookie: r.cookie, Err: err}
	r.state = stateDone
	e.deliver(r, m)
}

// deliver hands a complete message to a waiting goroutine, or queues it.
func (e *Endpoint) deliver(r *rpc, m *Message) {
	var w *waiter
	switch {
	case r.waiter != nil:
		w, r.waiter = r.waiter, nil
	case e.rxSelf != nil && e.rxSelf.link.listed:
		// The goroutine that read the packet waits for any message:
		// it keeps this one, with no hand-off.
		w = e.rxSelf
		e.anyWait.remove(w)
	default:
		if w = e.anyWait.head; w != nil {
			e.anyWait.remove(w)
		}
	}
	if w == nil {
		r.msg = m
		e.ready.push(m)
		return
	}
	if !m.IsRequest() {
		e.forgetClient(m.ID)
	}
	w.ch <- m
}

// Close shuts the endpoint down: RPCs end, waiting goroutines get
// ErrClosed, and the Conn is closed. It is idempotent.
func (e *Endpoint) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	for w := e.anyWait.head; w != nil; w = e.anyWait.head {
		e.anyWait.remove(w)
		w.ch <- nil
	}
	for id, r := range e.clients {
		if r.waiter != nil {
			r.waiter.ch <- nil
			r.waiter = nil
		}
		r.out.release()
		r.in.release()
		delete(e.clients, id)
	}
	for k, r := range e.servers {
		r.out.release()
		r.in.release()
		delete(e.servers, k)
	}
	for m := e.ready.head; m != nil; m = e.ready.head {
		e.ready.remove(m)
		m.Release()
	}
	e.mu.Unlock()
	close(e.done)
	err := e.conn.Close()
	e.wg.Wait()
	return err
}

// peerFor returns the state for a peer host, creating it.
func (e *Endpoint) peerFor(addr netip.Addr) *peer {
	if p := e.peers[addr]; p != nil {
		return p
	}
	maxPkt := e.conn.MaxPacket(addr)
	if e.cfg.MaxPacket > 0 {
		maxPkt = min(maxPkt, e.cfg.MaxPacket)
	}
	p := &peer{
		addr:        addr,
		maxPayload:  max(maxPkt-wire.DataLen, 1),
		cutoffs:     priority.Default,
		cutoffsSent: priority.NeverSent,
		heard:       e.now,
	}
	e.peers[addr] = p
	return p
}

// rxLoop reads and dispatches packets until the Conn closes. With a
// Poller it parks in WaitReadable and reads when a packet is queued,
// unless a goroutine polling from Recv holds the socket: then it waits
// for that one to stop. Without a Poller it parks in ReadBatch.
func (e *Endpoint) rxLoop() {
	defer e.wg.Done()
	b := &txBatch{}
	for {
		var err error
		if e.poller != nil {
			err = e.poller.WaitReadable()
			switch {
			case err != nil:
			case e.rxTok.TryLock():
				err = e.readBatch(b, nil, e.poller.TryReadBatch)
			case e.appPolling.Load():
				// A goroutine in Recv is reading: leave the packets to
				// it until it stops.
				select {
				case <-e.pollIdle:
				case <-e.done:
					return
				}
			}
		} else {
			e.rxTok.Lock()
			err = e.readBatch(b, nil, e.conn.ReadBatch)
		}
		if err != nil {
			if errors.Is(err, net.ErrClosed) || e.isClosed() {
				return
			}
			e.stats.readErrors.Add(1)
		}
	}
}

// readBatch reads with read and processes what came, on behalf of the
// waiter self (nil for the background reader). The caller holds rxTok;
// readBatch releases it.
func (e *Endpoint) readBatch(b *txBatch, self *waiter, read func([]netio.Packet) (int, error)) error {
	e.allocRx()
	n, err := read(e.rxPkts)
	if n > 0 {
		e.process(e.rxPkts[:n], b, self)
	}
	e.rxTok.Unlock()
	return err
}

// allocRx gives the receive batch its buffers, on first use, so that an
// endpoint that never reads holds none. Each takes the largest IP packet.
// The caller holds rxTok.
func (e *Endpoint) allocRx() {
	if e.rxPkts[0].Buf != nil {
		return
	}
	for i := range e.rxPkts {
		e.rxPkts[i].Buf = make([]byte, 1<<16)
	}
}

// poll is the fast path of Recv: if no one else is reading the socket,
// the waiting goroutine reads it itself for up to PollDuration after the
// last packet, so its message reaches it without any hand-off between
// goroutines. It reports whether it received what was sent on w.ch (a
// message, or nil when the endpoint closed); if not, it gave up and the
// message arrives on w.ch as usual.
func (e *Endpoint) poll(ctx context.Context, w *waiter) (*Message, bool) {
	if e.poller == nil || !e.rxTok.TryLock() {
		return nil, false
	}
	e.appPolling.Store(true)
	b := e.getBatch()
	defer func() {
		e.batches.Put(b)
		e.appPolling.Store(false)
		select {
		case e.pollIdle <- struct{}{}:
		default:
		}
	}()
	deadline := time.Now().Add(e.cfg.PollDuration)
	for {
		select {
		case m := <-w.ch:
			e.rxTok.Unlock()
			return m, true
		default:
		}
		e.allocRx()
		n, err := e.poller.TryReadBatch(e.rxPkts)
		switch {
		case n > 0:
			e.process(e.rxPkts[:n], b, w)
			deadline = time.Now().Add(e.cfg.PollDuration)
			continue
		case err != nil && (errors.Is(err, net.ErrClosed) || e.isClosed()):
		case ctx.Err() == nil && time.Now().Before(deadline):
			runtime.Gosched()
			continue
		}
		e.rxTok.Unlock()
		return nil, false
	}
}

func (e *Endpoint) isClosed() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// process handles a batch of received packets under one lock, then sends
// what they caused. self is the waiter of the calling goroutine, if it
// polls from Recv.
func (e *Endpoint) process(pkts []netio.Packet, b *txBatch, self *waiter) {
	e.mu.Lock()
	if !e.closed {
		e.rxSelf = self
		for i := range pkts {
			e.handle(pkts[i].Bytes(), pkts[i].Addr, b)
		}
		e.rxSelf = nil
		e.decideGrants(b)
	}
	e.mu.Unlock()
	e.flush(b)
}

// HandlePacket feeds one received packet to the endpoint, as if it had
// arrived from src. Tests and fuzzers use it to inject arbitrary bytes.
func (e *Endpoint) HandlePacket(pkt []byte, src netip.Addr) {
	b := e.getBatch()
	e.mu.Lock()
	if !e.closed {
		e.handle(pkt, src, b)
		e.decideGrants(b)
	}
	e.mu.Unlock()
	e.sendBatch(b)
}
