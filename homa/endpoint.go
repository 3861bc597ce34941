// Package homa is the Homa transport engine: an Endpoint owns one Homa
// port on a netio.Conn and runs the protocol (package homa/core) behind
// it for the clients and servers of that port.
//
// The Endpoint is the shell around the protocol core: it owns the
// goroutines, the clock, the socket and the locking. One mutex
// serializes the core and the mailbox where complete messages wait; the
// receive goroutine takes it once per batch of packets, application
// goroutines in Send, Reply, Recv and Abort. Packets are built under it
// and written after it is released. One timer is armed at the core's
// next deadline: an idle endpoint does no work and never wakes up.
//
// Applications use package sock, which wraps an Endpoint (or the Linux
// kernel module) behind the same socket API.
package homa

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/netio"
	"github.com/homa-go/homa/internal/transport/mailbox"
)

// rxBatch is how many packets one read takes at most.
const rxBatch = 16

// Endpoint is a Homa endpoint bound to one port. It is safe for concurrent
// use by many goroutines.
type Endpoint struct {
	conn  netio.Conn
	cfg   Config
	port  uint16
	is4   bool
	epoch time.Time

	mu      sync.Mutex
	closed  bool
	core    *core.Core
	cache   bufCache // the core's buffers in front of the pool (bufcache.go)
	mb      *mailbox.Mailbox
	out     core.Output     // what the current core call produced
	rxSelf  *mailbox.Waiter // the waiter of the goroutine processing packets, if it polls from Recv
	rxIn    []core.Inbound  // scratch for HandleBatch
	timer   *time.Timer     // armed at timerAt when timerOn
	timerAt time.Duration
	timerOn bool
	// timerSet is the deadline the runtime timer is set for (0: none,
	// stopped or fired): a reset to it would be a thread wake-up for
	// nothing (see applyTimer).
	timerSet time.Duration
	// timerDirty says the timer is yet to be reset to timerAt: settle
	// leaves that to the flush of its batch (applyTimer), after the
	// packets are sent, or, for a caller's request or a response, to
	// the goroutine that parks or stops reading next (timerLazy; see
	// Lazy arming).
	timerDirty bool
	// timerLazy says a reset of the timer waits for a goroutine that
	// stops reading or parks (see Lazy arming); set under mu, read
	// without it.
	timerLazy atomic.Bool
	// calling is set while SendBorrowed settles: its caller reads the
	// socket next, so the background reader's grace is not armed, nor
	// the timer reset (see Lazy arming).
	calling bool
	// replying is set while a response settles: its NEED_ACK deadline
	// is left to a reader that waits for the acknowledgment (see Lazy
	// arming).
	replying bool
	// ackWait is core.AwaitsAcks as of the last settle: a reader
	// waiting for any message spins for the acknowledgments (see
	// Awaiting acknowledgments in poll.go).
	ackWait atomic.Bool
	dueAt   atomic.Int64 // timerAt while timerOn, else 0: read by spinning readers (runDue)
	// trimAt is when the endpoint next trims the process's buffer pool
	// (0: not until it is busy again; see trimPool).
	trimAt time.Duration
	// behind says the last read filled its batch: more packets are
	// likely waiting in the socket (see postpone).
	behind bool

	// Receiving (see receive.go). Whoever holds rxTok reads the Conn
	// (into rxPkts): a goroutine in Recv, or else the background reader.
	poller      netio.Poller // nil when the Conn cannot be polled
	waker       netio.Waker  // nil when the Conn cannot be woken
	readConn    readFunc     // ReadBatch, or ReadBorrowed
	tryRead     readFunc     // the Poller's TryReadBatch or TryReadBorrowed; nil without a Poller
	rxOwn       bool         // rxPkts' buffers are the endpoint's (not borrowed): the core may keep them
	lands       bool         // reads land payloads where the core lends (receiving in place)
	lent        [][]byte     // the core's last loan (lands only)
	rxTok       sync.Mutex
	rxPkts      []netio.Packet
	rxBlocked   *mailbox.Waiter // a goroutine in Recv parked reading the socket (under mu)
	appReading  atomic.Bool     // an application goroutine holds rxTok
	rxParked    atomic.Bool     // the background reader is parked on the socket, holding rxTok
	idleWork    atomic.Bool     // the core has work for idle (set under mu)
	quiet       atomic.Bool     // the core has nothing in progress (core.Quiet; set under mu)
	shared      bool            // the Conn is netio.Shared: never quiet
	stealing    atomic.Int32    // goroutines in Recv waking the background reader for rxTok
	awaitingIDs atomic.Int32    // goroutines in awaitTurn
	readTurn    chan struct{}   // the socket is free for a goroutine in awaitTurn
	tokenFreed  chan struct{}   // the background reader let rxTok go while stealing (see takeToken)
	lastRead    atomic.Int64    // when a goroutine in Recv last stopped reading (e.now)
	rxNow       time.Duration   // when the holder of rxTok last processed packets
	rxYielded   time.Duration   // when the holder of rxTok last yielded its processor while spinning
	// The background reader waits for the goroutines in Recv to leave
	// the socket alone for readerGrace (see rxLoop): rxIdle is set while
	// it waits, and the grace timer (armed while graceArmed) tells it
	// through readerLeft when they have.
	rxIdle     atomic.Bool
	graceArmed atomic.Bool
	grace      *time.Timer
	readerLeft chan struct{}
	// readerWakeups counts the grace timer's firings: none while the
	// endpoint is idle.
	readerWakeups atomic.Uint64
	// graceArms counts the grace timer's arming (each a runtime timer
	// reset: a thread wake-up, see applyTimer).
	graceArms atomic.Uint64
	// cpuYields counts a spinning reader's yields of its thread's
	// processor (see spinRead).
	cpuYields atomic.Uint64
	// ackSpins counts the spins of readers waiting only for
	// acknowledgments, ackCaught those that saw them come (see Awaiting
	// acknowledgments in poll.go).
	ackSpins, ackCaught atomic.Uint64
	// spinsCut counts the spins ended early because another endpoint of
	// the process was parked and the process has one processor (see
	// One processor).
	spinsCut atomic.Uint64
	// queued tells whether a packet waits on the socket, for the
	// spinners of other endpoints while this one is parked; nil unless
	// the process has one processor (see One processor).
	queued netio.Queued
	// rxYield: the holder of rxTok stopped spinning for a parked
	// endpoint (see One processor).
	rxYield bool
	spin    spinBudget

	io      ioCounters
	batches recycler[txBatch]
	waiters recycler[mailbox.Waiter]
	done    chan struct{}
	// acks takes batches of acknowledgments alone that a reader whose
	// own message came leaves to ackLoop, so as to return at once;
	// acksLeft counts them.
	acks     chan *txBatch
	acksLeft atomic.Uint64
	wg       sync.WaitGroup
}

// NewEndpoint starts an endpoint on conn, which it owns from now on (Close
// closes it).
func NewEndpoint(conn netio.Conn, cfg Config) *Endpoint {
	cfg = cfg.withDefaults()
	is4 := conn.LocalAddr().Unmap().Is4()
	now := time.Now()
	epoch := cfg.Epoch
	if epoch.IsZero() || epoch.After(now) {
		epoch = now
	}
	e := &Endpoint{
		conn:   conn,
		cfg:    cfg,
		port:   conn.Port(),
		is4:    is4,
		epoch:  epoch,
		mb:     mailbox.New(),
		done:   make(chan struct{}),
		acks:   make(chan *txBatch, 4),
		rxPkts: make([]netio.Packet, rxBatch),
		rxIn:   make([]core.Inbound, 0, rxBatch),
	}
	e.core = core.New(core.Local{
		Port:    e.port,
		IPv6:    !is4,
		FirstID: core.FirstID(now.UnixMicro()),
		Buffers: pool{},
		Cache:   &e.cache,
		Seed:    rand.Uint64(),
	}, cfg.Config)
	e.cache.register()
	e.poller, _ = conn.(netio.Poller)
	if sc, ok := conn.(netio.Shared); ok && sc.Shared() {
		e.shared = true
	}
	if e.poller != nil {
		e.waker, _ = conn.(netio.Waker)
	}
	e.chooseReads()
	e.spin.init(cfg, conn)
	if q, ok := conn.(netio.Queued); ok && e.spin.oneProc {
		e.queued = q
	}
	e.lastRead.Store(-int64(time.Hour)) // no goroutine in Recv has read yet
	e.readerLeft = make(chan struct{}, 1)
	e.tokenFreed = make(chan struct{}, 1)
	e.readTurn = make(chan struct{}, 1)
	e.grace = time.AfterFunc(time.Hour, e.graceEnded)
	e.grace.Stop()
	e.timer = time.NewTimer(time.Hour)
	e.timer.Stop()
	e.wg.Add(3)
	go e.rxLoop()
	go e.timerLoop()
	go e.ackLoop()
	return e
}

// Port is the endpoint's Homa port.
func (e *Endpoint) Port() uint16 { return e.port }

// LocalAddr is the endpoint's address and port.
func (e *Endpoint) LocalAddr() netip.AddrPort {
	return netip.AddrPortFrom(e.conn.LocalAddr(), e.port)
}

// now is the endpoint's clock: time since it started, monotonic.
func (e *Endpoint) now() time.Duration { return time.Since(e.epoch) }

// maxPacket is the largest Homa packet to dst. It may ask the kernel
// (the Conn caches the answer), so it is called without the lock.
func (e *Endpoint) maxPacket(dst netip.Addr) int {
	n := e.conn.MaxPacket(dst)
	if e.cfg.MaxPacket > 0 {
		n = min(n, e.cfg.MaxPacket)
	}
	return n
}

// Send starts a client RPC: it sends the request data to dst and returns
// the RPC's id. The response arrives through Recv, with cookie attached.
// Send copies data; the caller may reuse it at once.
func (e *Endpoint) Send(dst netip.AddrPort, data []byte, cookie uint64) (uint64, error) {
	return e.send(dst, data, cookie, false)
}

// SendBorrowed is Send without the copy, for a caller that leaves data
// untouched until the RPC ends (as sock's Call does): the endpoint sends
// straight from data and never recycles it. Before touching data again
// the caller calls Wait on the returned Borrow: it returns once nothing
// reads data any more, which is at once when the response has come (the
// server had the whole request); after a failure or Abort, packets that
// point into data may still be on their way to the socket. Requests
// below core.ZeroCopyMin bytes, which packets copy anyway, are copied.
// The caller is taken to wait for the response next (Recv of the id),
// reading the socket itself: the background reader is not set to take
// the socket over meanwhile.
func (e *Endpoint) SendBorrowed(dst netip.AddrPort, data []byte, cookie uint64) (uint64, Borrow, error) {
	addr, maxPkt, err := e.checkSend(dst, data)
	if err != nil {
		return 0, Borrow{}, err
	}
	b := e.getBatch()
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		e.putBatch(b)
		return 0, Borrow{}, contract.ErrClosed
	}
	id, h, err := e.core.SendBorrowed(netip.AddrPortFrom(addr, dst.Port()), data, cookie, maxPkt, e.now(), &e.out)
	if err == nil {
		e.mb.Expect(id)
	} else {
		err = &contract.OpError{Op: "send", Peer: dst, Err: err}
	}
	e.calling = err == nil
	e.settle(b)
	e.calling = false
	e.mu.Unlock()
	e.sendBatch(b)
	return id, Borrow{h}, err
}

// Borrow is the endpoint's use of a buffer given to SendBorrowed.
type Borrow struct{ h *core.Hold }

// Wait returns once the endpoint reads the buffer no more (at once when
// the request was copied).
func (b Borrow) Wait() {
	for b.h != nil && !b.h.Done() {
		runtime.Gosched()
	}
}

// SendOwned is Send without the copy: the endpoint takes data over, sends
// its bytes straight from it and recycles it into the buffer pool when
// the RPC ends. The caller must not touch data after the call, unless
// it fails (data is then the caller's again). Worth it for large
// messages; below core.ZeroCopyMin bytes packets copy the message anyway.
func (e *Endpoint) SendOwned(dst netip.AddrPort, data []byte, cookie uint64) (uint64, error) {
	return e.send(dst, data, cookie, true)
}

func (e *Endpoint) send(dst netip.AddrPort, data []byte, cookie uint64, owned bool) (uint64, error) {
	b := e.getBatch()
	id, err := e.sendInto(b, dst, data, cookie, owned)
	e.sendBatch(b)
	return id, err
}

// sendInto is send with its packets left in b for the caller to send.
func (e *Endpoint) sendInto(b *txBatch, dst netip.AddrPort, data []byte, cookie uint64, owned bool) (uint64, error) {
	addr, maxPkt, err := e.checkSend(dst, data)
	if err != nil {
		return 0, err
	}
	buf := e.own(data, owned)
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		e.disown(buf, data, owned)
		return 0, contract.ErrClosed
	}
	buf = e.ownLocked(buf, owned)
	id, err := e.core.Send(netip.AddrPortFrom(addr, dst.Port()), buf, cookie, maxPkt, e.now(), &e.out)
	if err == nil {
		e.mb.Expect(id)
	} else {
		e.disown(buf, data, owned)
		err = &contract.OpError{Op: "send", Peer: dst, Err: err}
	}
	e.settle(b)
	e.mu.Unlock()
	return id, err
}

// Reply sends the response to the request with the given id from the
// client at peer. Reply copies data.
func (e *Endpoint) Reply(peer netip.Addr, id uint64, data []byte) error {
	return e.reply(peer, id, data, false)
}

// ReplyOwned is Reply without the copy; it takes data over as SendOwned
// does.
func (e *Endpoint) ReplyOwned(peer netip.Addr, id uint64, data []byte) error {
	return e.reply(peer, id, data, true)
}

func (e *Endpoint) reply(peer netip.Addr, id uint64, data []byte, owned bool) error {
	b := e.getBatch()
	err := e.replyInto(b, peer, id, data, owned)
	e.sendBatch(b)
	return err
}

// replyInto is reply with its packets left in b for the caller to send.
func (e *Endpoint) replyInto(b *txBatch, peer netip.Addr, id uint64, data []byte, owned bool) error {
	if len(data) == 0 || len(data) > contract.MaxMessage {
		return &contract.OpError{Op: "reply", Peer: netip.AddrPortFrom(peer, 0), ID: id, Err: contract.ErrMessageTooLong}
	}
	if e.is4 {
		peer = peer.Unmap()
	}
	maxPkt := e.maxPacket(peer)
	buf := e.own(data, owned)
	e.mu.Lock()
	var err error = contract.ErrClosed
	if !e.closed {
		buf = e.ownLocked(buf, owned)
		err = e.core.Reply(peer, id, buf, maxPkt, e.now(), &e.out)
	}
	e.replying = err == nil
	e.settle(b)
	e.replying = false
	e.mu.Unlock()
	if err != nil {
		e.disown(buf, data, owned)
		if err != contract.ErrClosed {
			err = &contract.OpError{Op: "reply", Peer: netip.AddrPortFrom(peer, 0), ID: id, Err: err}
		}
	}
	return err
}

// checkSend validates a request to dst and returns dst's address as the
// core keys it and the largest packet to it.
func (e *Endpoint) checkSend(dst netip.AddrPort, data []byte) (netip.Addr, int, error) {
	if len(data) == 0 || len(data) > contract.MaxMessage {
		return netip.Addr{}, 0, &contract.OpError{Op: "send", Peer: dst, Err: contract.ErrMessageTooLong}
	}
	addr := dst.Addr()
	if e.is4 {
		addr = addr.Unmap()
	}
	if dst.Port() == 0 || !addr.IsValid() || addr.Is4() != e.is4 {
		return netip.Addr{}, 0, &contract.OpError{Op: "send", Peer: dst, Err: contract.ErrBadAddress}
	}
	return addr, e.maxPacket(addr), nil
}

// own returns the buffer the core sends a message from: data itself when
// the caller hands it over, otherwise a pooled copy. A message below
// core.ZeroCopyMin bytes is copied later, under mu, by ownLocked: the
// copy is short, and its buffer then comes from the endpoint's cache.
func (e *Endpoint) own(data []byte, owned bool) []byte {
	if owned || len(data) < core.ZeroCopyMin {
		return data
	}
	buf := getBuf(len(data))
	copy(buf, data)
	return buf
}

// ownLocked finishes own for a small message. The caller holds mu.
func (e *Endpoint) ownLocked(buf []byte, owned bool) []byte {
	if owned || len(buf) >= core.ZeroCopyMin {
		return buf
	}
	own := e.cache.Get(len(buf))
	copy(own, buf)
	return own
}

// disown takes back a buffer from own or ownLocked that the core did
// not accept: a copy, that is, not data itself, which is the caller's.
func (e *Endpoint) disown(buf, data []byte, owned bool) {
	if !owned && &buf[0] != &data[0] {
		putBuf(buf)
	}
}

// Recv returns the next complete message: with id 0, any request or
// response; otherwise the response of the client RPC id. It blocks until
// one is ready, ctx is done, or the endpoint closes. A failed client RPC
// is returned as a Message with Err set.
func (e *Endpoint) Recv(ctx context.Context, id uint64) (*contract.Message, error) {
	w := e.getWaiter()
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		e.putWaiter(w)
		return nil, contract.ErrClosed
	}
	m, err := e.mb.Take(id, w)
	if m != nil {
		e.taken(m)
	}
	request := 0 // how long a request the response answers (see Polling)
	if m == nil && err == nil {
		e.quiet.Store(false) // a goroutine waits
		if id != 0 {
			request = e.core.RequestLength(id)
		}
	}
	e.mu.Unlock()
	if m != nil || err != nil {
		e.putWaiter(w)
		return m, err
	}
	if id == 0 {
		return e.wait(ctx, w, false, 0)
	}
	start := e.now()
	m, err = e.wait(ctx, w, true, request)
	if err == nil {
		e.spin.waited(e.now() - start)
	}
	return m, err
}

// taken notes that m went to the application: a request's storage is
// the application's from now on. The caller holds mu.
func (e *Endpoint) taken(m *contract.Message) {
	if m.IsRequest() {
		e.delivered(m.Peer.Addr(), m.ID, len(m.Data))
	}
}

// delivered records that the request id of client host peer, n bytes
// long, went to the application.
func (e *Endpoint) delivered(peer netip.Addr, id uint64, n int) {
	e.core.Delivered(peer, id)
	e.spin.served.Store(int64(n))
}

// Abort ends the client RPC id. A goroutine waiting in Recv for this id
// receives a Message with Err ErrAborted; otherwise the RPC is simply
// forgotten (the caller knows), and no later Recv sees it. The server is
// not told.
func (e *Endpoint) Abort(id uint64) error {
	b := e.getBatch()
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		e.putBatch(b)
		return contract.ErrClosed
	}
	failure, err := e.core.Abort(id, e.now(), &e.out)
	if failure == nil {
		failure = &contract.Message{ID: id, Err: &contract.OpError{Op: "abort", ID: id, Err: contract.ErrAborted}}
	}
	if e.mb.Abort(id, failure) {
		err = nil
	}
	e.wakeBlocked()
	e.settle(b)
	e.mu.Unlock()
	e.sendBatch(b)
	if err != nil {
		return &contract.OpError{Op: "abort", ID: id, Err: err}
	}
	return nil
}

// settle finishes a core call under mu: it delivers the messages the
// call produced, moves its packets into b (to be written once mu is
// released), and arms the timer at the core's next deadline.
func (e *Endpoint) settle(b *txBatch) {
	busy := len(e.out.Messages) > 0 || len(e.out.Packets) > 0
	for _, m := range e.out.Messages {
		// A message handed to a waiting goroutine is that goroutine's at
		// once (it may release it): read what taken needs before.
		req, peer, id, n := m.IsRequest(), m.Peer.Addr(), m.ID, len(m.Data)
		w := e.mb.Deliver(m, e.rxSelf)
		if w == nil {
			continue
		}
		if w != e.rxSelf {
			e.io.handoffs.Add(1)
		}
		if req {
			e.delivered(peer, id, n)
			e.spin.arrived(e.rxNow)
		}
	}
	e.wakeBlocked()
	b.take(&e.out)
	e.out.Reset()
	e.idleWork.Store(e.core.IdleWork())
	if e.closed {
		return
	}
	e.noteQuiet(b)
	at, ok := e.core.Next()
	if busy && e.trimAt == 0 {
		e.trimAt = e.now() + trimEvery // busy again: trim the pool after a while
	}
	if e.trimAt != 0 && (!ok || e.trimAt < at) {
		at, ok = e.trimAt, true
	}
	switch {
	case ok && (!e.timerOn || at < e.timerAt):
		e.timerOn, e.timerAt = true, at
		e.dueAt.Store(int64(max(at, 1)))
		e.noteReset(b)
	case !e.timerOn:
	case !ok:
		// What the timer was armed for is gone (an acknowledgment freed
		// the RPC whose NEED_ACK was due, a response ended the RPC whose
		// RESEND was): it would wake the endpoint for nothing.
		e.stopTimer()
	case at > e.timerAt+staleTimer:
		e.timerAt = at
		e.dueAt.Store(int64(max(at, 1)))
		e.noteReset(b)
	}
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
	b := e.getBatch()
	e.core.Close(e.now(), &e.out)
	e.settle(b) // the acknowledgments
	e.cache.close()
	e.mb.Close()
	e.mu.Unlock()
	e.sendBatch(b)
	close(e.done)
	e.grace.Stop()
	err := e.conn.Close()
	e.wg.Wait()
	return err
}

// HandlePacket feeds one received packet to the endpoint, as if it had
// arrived from src. Tests and fuzzers use it to inject arbitrary bytes.
func (e *Endpoint) HandlePacket(pkt []byte, src netip.Addr) {
	b := e.getBatch()
	e.mu.Lock()
	if !e.closed {
		e.core.Handle(pkt, src, e.now(), &e.out)
		e.settle(b)
		if e.core.IdleWork() {
			e.core.Idle(e.now(), &e.out) // as if nothing more came
			e.settle(b)
		}
	}
	e.mu.Unlock()
	e.sendBatch(b)
}

// getWaiter and putWaiter recycle waiters per endpoint. Not across
// endpoints: a waiter's channel then always belongs to the endpoint's own
// world (which matters to testing/synctest bubbles).
func (e *Endpoint) getWaiter() *mailbox.Waiter {
	if w := e.waiters.get(); w != nil {
		return w
	}
	return mailbox.NewWaiter()
}

func (e *Endpoint) putWaiter(w *mailbox.Waiter) { e.waiters.put(w) }
