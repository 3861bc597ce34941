package erpc

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/homa-go/homa/sock"
)

// Rpc is an endpoint owned by one goroutine: it holds one Homa socket
// (bound to a server port, so that it both serves and calls), its client
// sessions, and an event loop that receives from the socket directly.
// Continuations and dispatch handlers run only inside that event loop.
//
// Every method is for the owning goroutine, except Submit (any
// goroutine: it hands a function to the event loop, which may then use
// every method), EnqueueResponse (any goroutine, so background handlers
// answer from their workers), AllocMsgBuffer, ResizeMsgBuffer and
// FreeMsgBuffer (any goroutine, on buffers it owns), and ID, LocalAddr
// and Stats. The owner may change: a goroutine may hand an Rpc to another
// before it starts using it. An owner-only method called by a second
// goroutine while the owner runs the event loop or another owner-only
// method fails with an *OwnerError (ErrNotOwner), or panics with it if it
// returns no error, instead of racing; see Submit.
type Rpc struct {
	nx   *Nexus
	cfg  *Config
	id   uint8
	sock *sock.Socket
	sm   SMHandler
	pool bufPool

	closed  atomic.Bool
	cleaned bool // the owner has failed what was pending after the close

	use atomic.Int32 // useIdle, useCall, useLoop or useRecv
	sub submitQueue  // functions from other goroutines, for the loop

	// Owned by the goroutine that runs the event loop.
	inLoop     bool
	stopLoop   bool       // StopEventLoop was called
	sessions   []*session // by number; state sessFree when unused
	freeNums   []uint32
	live       int // sessions not free
	reqFree    []*request
	hfree      []*ReqHandle               // handles answered within their dispatch call
	pending    []deferred                 // continuations and events to run, in order
	attempts   dlist[request]             // exactly-once attempts outstanding, by send time
	acks       dlist[session]             // sessions with acknowledgments due, by when due
	conns      dlist[session]             // sessions waiting for a connect reply, by send time
	tickets    dlist[Ticket]              // tickets not resumed or released, by when made
	nbCtx      context.Context            // always done: Recv without blocking
	streams    map[netip.AddrPort]*stream // by server Nexus, for new sessions
	allStreams map[*stream]struct{}       // every stream not ended, retired ones too
	holdFree   []*seqHold
	scratch    []byte // a fragment of an exactly-once large response, being sent
	pullHdr    []byte // a pull, being sent
	fragPeak   int    // the most transport RPCs one large exchange had in flight

	// The turn's batch: while the event loop runs a turn, the requests
	// it sends and the responses given to requests (by its dispatch
	// handlers, or by workers meanwhile) gather in tx and leave together
	// when the loop is about to wait or return (closeTurn), one system
	// call for the turn. Between turns responses go at once. Workers
	// share it, hence the lock.
	txMu   sync.Mutex
	tx     *sock.Batch // guarded by txMu
	txOpen bool        // guarded by txMu: a turn is running

	// The server side, shared with the Nexus goroutine (connects and
	// disconnects) and background workers (responses).
	srvMu    sync.Mutex
	srvTab   atomic.Pointer[[]*srvSession] // copied on write; read without locks
	srvFree  []uint32
	srvLive  int
	srvHosts hostCount // live sessions by client host
	srvToken uint32
	eo       eoTable
	large    largeTable
	handles  handlePool

	stats counters
}

// SMEvent is what happened to a client session.
type SMEvent uint8

const (
	// Connected: the server Rpc accepted the session.
	Connected SMEvent = iota + 1
	// ConnectFailed: nobody answered, or the remote Nexus has no such
	// Rpc, or it refused. The session takes no requests; destroy it.
	ConnectFailed
	// Disconnected: DestroySession finished (err says whether the server
	// confirmed).
	Disconnected
	// Reset: the server was declared dead or forgot the session. Every
	// pending request has already failed; destroy the session.
	Reset
)

func (e SMEvent) String() string {
	switch e {
	case Connected:
		return "connected"
	case ConnectFailed:
		return "connect-failed"
	case Disconnected:
		return "disconnected"
	case Reset:
		return "reset"
	}
	return "SMEvent(?)"
}

// SMHandler is told about the Rpc's client sessions. It runs in the
// event loop. err is nil for Connected, and says why otherwise.
type SMHandler func(s Session, ev SMEvent, err error)

// Continuation is called in the event loop when a request completes. On
// success err is nil and resp holds the response; otherwise err says why
// (errors.Is against this package's errors and sock's). Either way the
// request and response buffers belong to the application again; tag is
// what EnqueueRequest was given.
type Continuation func(resp *MsgBuffer, tag any, err error)

// deferred is a continuation or an event waiting to run in the loop.
type deferred struct {
	cont Continuation
	resp *MsgBuffer
	tag  any
	err  error
	sm   bool // an event rather than a continuation
	ev   SMEvent
	sess Session
}

func newRpc(nx *Nexus, id uint8, s *sock.Socket, sm SMHandler) *Rpc {
	nb, cancel := context.WithCancel(context.Background())
	cancel()
	r := &Rpc{
		nx:       nx,
		cfg:      &nx.cfg,
		id:       id,
		sock:     s,
		sm:       sm,
		nbCtx:    nb,
		tx:       s.NewBatch(),
		attempts: newDlist(func(q *request) *dlink[request] { return &q.link }),
		acks:     newDlist(func(s *session) *dlink[session] { return &s.ackLink }),
		conns:    newDlist(func(s *session) *dlink[session] { return &s.connLink }),
		tickets:  newDlist(func(t *Ticket) *dlink[Ticket] { return &t.link }),
	}
	r.eo.init(&nx.cfg.ExactlyOnce, &r.stats, &r.pool)
	r.pool.max = nx.cfg.MaxMessage
	// Tokens start at random, so that a session of a server that has
	// restarted does not match a new one by chance.
	r.srvToken = rand.Uint32()
	r.large.init(&r.pool)
	tab := []*srvSession{}
	r.srvTab.Store(&tab)
	return r
}

// ID is the Rpc's id within its Nexus.
func (r *Rpc) ID() uint8 { return r.id }

// LocalAddr is the address of the Rpc's Homa socket.
func (r *Rpc) LocalAddr() netip.AddrPort { return r.sock.LocalAddr() }

// AllocMsgBuffer returns a buffer for a message of n bytes (0 to
// Config.MaxMessage) from the Rpc's pool; it can later be resized up to
// n.
func (r *Rpc) AllocMsgBuffer(n int) (*MsgBuffer, error) { return r.pool.get(n) }

// ResizeMsgBuffer sets the length of m's message to n, which must not
// exceed the size m was allocated with. The data is kept up to n.
func (r *Rpc) ResizeMsgBuffer(m *MsgBuffer, n int) error {
	if m.state != bufApp {
		return ErrBufferInUse
	}
	if n < 0 || n > m.max {
		return ErrMessageTooLarge
	}
	m.n = n
	return nil
}

// FreeMsgBuffer returns m to its pool. It panics if m is already free or
// still held by a pending request.
func (r *Rpc) FreeMsgBuffer(m *MsgBuffer) {
	if m.pool == nil {
		panic("erpc: FreeMsgBuffer of a handle's PreResp buffer")
	}
	m.pool.put(m)
}

// Close closes the Rpc: its socket closes, the Nexus forgets it (so
// connects to it fail with ErrNoSuchRpc), and every pending request fails
// with ErrClosed, its continuation run before Close returns. Destroy
// sessions first to let servers free their state. Close is idempotent.
func (r *Rpc) Close() error {
	r.shutdown()
	r.cleanup()
	if !r.inLoop {
		r.drain()
		r.runSubmitted()
	}
	return nil
}

// shutdown closes the socket; any goroutine may call it.
func (r *Rpc) shutdown() {
	if r.closed.Swap(true) {
		return
	}
	r.nx.forget(r)
	r.sock.Close()
}

// cleanup fails the pending requests of every session after a close. The
// owner runs it.
func (r *Rpc) cleanup() {
	if r.cleaned {
		return
	}
	r.cleaned = true
	for _, s := range r.sessions {
		if s.state == sessFree {
			continue
		}
		r.failSession(s, ErrClosed)
		r.freeSession(s)
	}
	for st := range r.allStreams {
		r.endStream(st)
	}
}

// RunEventLoop runs the event loop for the given time: it receives
// requests and responses, runs handlers and continuations, sends queued
// requests and retries, and handles session management. It returns nil
// when the time is up and ErrClosed when the Rpc closes.
func (r *Rpc) RunEventLoop(timeout time.Duration) error {
	if timeout <= 0 {
		return r.RunEventLoopOnce()
	}
	held, err := r.acquire("RunEventLoop")
	if err != nil {
		return err
	}
	defer r.release(held)
	return r.loop(context.Background(), time.Now().Add(timeout), nil)
}

// Serve runs the event loop until ctx ends (returning ctx.Err()) or the
// Rpc closes (returning ErrClosed).
func (r *Rpc) Serve(ctx context.Context) error {
	held, err := r.acquire("Serve")
	if err != nil {
		return err
	}
	defer r.release(held)
	return r.loop(ctx, time.Time{}, nil)
}

// StopEventLoop makes the event loop return (nil) once the continuation
// or dispatch handler that calls it has returned: a client that knows
// from its continuations when it is done uses it to end RunEventLoop or
// Serve, which need then not watch a context.
func (r *Rpc) StopEventLoop() {
	switch r.use.Load() {
	case useLoop:
		r.stopLoop = r.inLoop
	case useIdle:
	default:
		panic(&OwnerError{Op: "StopEventLoop"})
	}
}

// onceBatch bounds the messages one RunEventLoopOnce handles.
const onceBatch = 16

// RunEventLoopOnce does the work that is ready now, without blocking:
// due timers, and up to 16 received messages.
func (r *Rpc) RunEventLoopOnce() error {
	held, err := r.acquire("RunEventLoopOnce")
	if err != nil {
		return err
	}
	defer r.release(held)
	if r.inLoop {
		return ErrInEventLoop
	}
	r.inLoop = true
	prev := r.use.Swap(useLoop)
	r.openTurn()
	defer func() { r.closeTurn(); r.inLoop, r.stopLoop = false, false; r.use.Store(prev) }()
	r.drain()
	r.runSubmitted()
	if r.closed.Load() {
		return r.closedNow()
	}
	if r.hasTimers() {
		r.runTimers(time.Now())
		r.drain()
	}
	for range onceBatch {
		if r.stopLoop {
			return nil
		}
		m, err := r.sock.Recv(r.nbCtx, sock.Any)
		if err != nil {
			if r.closed.Load() || errors.Is(err, sock.ErrClosed) {
				return r.closedNow()
			}
			return nil
		}
		r.handle(m)
		r.drain()
		r.runSubmitted()
	}
	return nil
}

// loop runs the event loop until end (if not zero), ctx's end, the close
// of the Rpc, or stop() (if not nil) reports true after some work.
func (r *Rpc) loop(ctx context.Context, end time.Time, stop func() bool) error {
	if r.inLoop {
		return ErrInEventLoop
	}
	r.inLoop = true
	prev := r.use.Swap(useLoop)
	r.openTurn()
	defer func() { r.closeTurn(); r.inLoop, r.stopLoop = false, false; r.use.Store(prev) }()

	var w waker
	defer w.stop()
	var wake context.Context // ctx, ended early by Submit
	defer r.disarmWake()
	for {
		r.drain()
		r.runSubmitted()
		if r.closed.Load() {
			return r.closedNow()
		}
		if stop != nil && stop() || r.stopLoop {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		// The clock is read only when the waker has fired (the end or a
		// timer is due), not per message.
		if w.fired() {
			if w.at.Equal(end) {
				return nil
			}
			w.stop()
			r.runTimers(time.Now())
			continue // run what the timers queued, check again
		}
		next := end
		if r.hasTimers() {
			if t, ok := r.nextTimer(); ok && (next.IsZero() || t.Before(next)) {
				next = t
			}
		}
		wake = r.armWake(ctx, wake)
		rctx := wake
		if !next.IsZero() {
			rctx = w.until(wake, next)
		}
		r.closeTurn() // what this turn sent, before the loop waits
		r.use.Store(useRecv)
		m, err := r.sock.Recv(rctx, sock.Any)
		r.use.Store(useLoop)
		r.openTurn()
		if err != nil {
			if r.closed.Load() || errors.Is(err, sock.ErrClosed) {
				return r.closedNow()
			}
			if rctx.Err() != nil {
				continue // the waker fired, Submit woke us, or ctx ended: checked above
			}
			return err
		}
		r.handle(m)
		// The messages already complete are this turn's too: what
		// their handlers and continuations send leaves with the rest.
		for range onceBatch {
			if r.stopLoop || r.closed.Load() {
				break
			}
			if m, err = r.sock.Recv(r.nbCtx, sock.Any); err != nil {
				break
			}
			r.handle(m)
		}
	}
}

// openTurn starts a turn of the event loop: sends and responses gather
// in the turn's batch.
func (r *Rpc) openTurn() {
	r.txMu.Lock()
	r.txOpen = true
	r.txMu.Unlock()
}

// closeTurn sends what the turn gathered; until the next turn, sends and
// responses go at once.
func (r *Rpc) closeTurn() {
	r.txMu.Lock()
	r.tx.Flush()
	r.txOpen = false
	r.txMu.Unlock()
}

// reply answers m with frame: in the turn's batch while a turn runs, at
// once otherwise. Any goroutine may call it.
func (r *Rpc) reply(m *sock.Message, frame []byte) error {
	r.txMu.Lock()
	if r.txOpen {
		err := r.tx.Reply(m, frame)
		r.txMu.Unlock()
		return err
	}
	r.txMu.Unlock()
	return r.sock.Reply(m, frame)
}

// waker is the context the event loop blocks with: it ends at the next
// timer or the end of the loop. It is made again only when it has fired
// or an earlier deadline appears (timers have fixed durations, so new
// ones come later), not per message.
type waker struct {
	ctx    context.Context
	cancel context.CancelFunc
	at     time.Time
}

func (w *waker) until(parent context.Context, at time.Time) context.Context {
	if w.ctx == nil || w.ctx.Err() != nil || at.Before(w.at) {
		w.stop()
		w.ctx, w.cancel = context.WithDeadline(parent, at)
		w.at = at
	}
	return w.ctx
}

// fired reports whether the waker's deadline has passed.
func (w *waker) fired() bool { return w.ctx != nil && w.ctx.Err() == context.DeadlineExceeded }

func (w *waker) stop() {
	if w.cancel != nil {
		w.cancel()
		w.ctx, w.cancel = nil, nil
	}
}

// closedNow finishes what the close left pending and reports ErrClosed.
func (r *Rpc) closedNow() error {
	r.shutdown()
	r.cleanup()
	r.drain()
	r.runSubmitted()
	return ErrClosed
}

// handle dispatches one message from the socket.
func (r *Rpc) handle(m *sock.Message) {
	if m.IsRequest() {
		r.serveRequest(m)
		return
	}
	r.handleResponse(m)
}

// drain runs the deferred continuations and events, including any they
// add.
func (r *Rpc) drain() {
	for i := 0; i < len(r.pending); i++ {
		d := r.pending[i]
		r.pending[i] = deferred{}
		if d.sm {
			if r.sm != nil {
				r.sm(d.sess, d.ev, d.err)
			}
			continue
		}
		d.cont(d.resp, d.tag, d.err)
	}
	r.pending = r.pending[:0]
}

// event queues a session-management event.
func (r *Rpc) event(s *session, ev SMEvent, err error) {
	r.pending = append(r.pending, deferred{sm: true, ev: ev, sess: s.handle(), err: err})
}

// hasTimers reports whether anything waits for a time.
func (r *Rpc) hasTimers() bool {
	return r.attempts.len() > 0 || r.acks.len() > 0 || r.conns.len() > 0 || r.eo.next.Load() != 0 ||
		r.large.next.Load() != 0 || r.tickets.len() > 0
}

// nextTimer returns the earliest deadline of the timers.
func (r *Rpc) nextTimer() (time.Time, bool) {
	var t time.Time
	earliest := func(at time.Time) {
		if t.IsZero() || at.Before(t) {
			t = at
		}
	}
	eo := &r.cfg.ExactlyOnce
	if q, at := r.attempts.front(); q != nil {
		earliest(at.Add(eo.RetryTimeout))
	}
	if s, at := r.acks.front(); s != nil {
		earliest(at.Add(eo.AckDelay))
	}
	if s, at := r.conns.front(); s != nil {
		earliest(at.Add(r.cfg.ConnectTimeout))
	}
	if ns := r.eo.next.Load(); ns != 0 {
		earliest(time.Unix(0, ns))
	}
	if ns := r.large.next.Load(); ns != 0 {
		earliest(time.Unix(0, ns))
	}
	if tk, at := r.tickets.front(); tk != nil {
		earliest(at.Add(eo.TicketTimeout))
	}
	return t, !t.IsZero()
}

// runTimers handles every timer due by now.
func (r *Rpc) runTimers(now time.Time) {
	eo := &r.cfg.ExactlyOnce
	for q, at := r.attempts.front(); q != nil && !now.Before(at.Add(eo.RetryTimeout)); q, at = r.attempts.front() {
		r.attemptTimedOut(q, now)
	}
	for s, at := r.acks.front(); s != nil && !now.Before(at.Add(eo.AckDelay)); s, at = r.acks.front() {
		r.acks.remove(s)
		r.sendAck(s, now)
	}
	for s, at := r.conns.front(); s != nil && !now.Before(at.Add(r.cfg.ConnectTimeout)); s, at = r.conns.front() {
		r.conns.remove(s)
		r.connectTimedOut(s)
	}
	if ns := r.eo.next.Load(); ns != 0 && now.UnixNano() >= ns {
		r.eo.collect(now)
	}
	if ns := r.large.next.Load(); ns != 0 && now.UnixNano() >= ns {
		r.large.expire(now, r.cfg.MessageTimeout, &r.stats)
	}
	for tk, at := r.tickets.front(); tk != nil && !now.Before(at.Add(eo.TicketTimeout)); tk, at = r.tickets.front() {
		r.stats.ticketsDropped.Add(1)
		r.dropTicket(tk)
	}
}

// Stats are the counters of an Rpc.
type Stats struct {
	// Client side.
	RequestsSent      uint64 // transport RPCs carrying requests: first attempts and retries
	Retries           uint64 // exactly-once attempts sent again after a timeout
	ResponsesReceived uint64 // responses that completed a request
	RequestsFailed    uint64 // requests whose continuation got an error
	SessionResets     uint64 // sessions whose server was declared dead or forgot them
	StaleMessages     uint64 // responses for attempts already abandoned or failed
	// Server side.
	RequestsServed uint64 // requests handed to a handler
	ResponsesSent  uint64 // responses enqueued by handlers
	BadMessages    uint64 // requests refused: malformed, unknown session, unknown type
	ServerBusy     uint64 // requests refused because the background queue was full
	ServerSessions int    // sessions other Rpcs hold to this one
	// Exactly-once, server side.
	Duplicates     uint64 // duplicates answered from a completed record
	InProgressDups uint64 // duplicates that arrived while the original ran
	StaleDups      uint64 // duplicates of forgotten requests, answered stale
	RecordsFull    uint64 // requests refused for want of a record
	// RecordsFullPerHost counts those of RecordsFull refused because the
	// records of their client host held its share (MaxRecordsPerHost,
	// MaxRecordBytesPerHost).
	RecordsFullPerHost uint64
	RecordsExpired     uint64 // completed records forgotten by timeout, unacknowledged
	RecordsAcked       uint64 // records forgotten on the client's acknowledgment
	Records            int    // records held now
	RecordBytes        int    // response bytes they hold
	RecordsReserved    int    // bytes reserved by records in progress
	ResponsesLost      uint64 // responses not kept: too large for the room left, or unacknowledged for RecordTimeout
	// Exactly-once, client side.
	TicketsDropped uint64 // tickets released because a stream held MaxTickets
	// Large messages, client side.
	FragmentsSent    uint64 // fragments of large requests sent, every attempt
	FragmentsSkipped uint64 // fragments an exactly-once attempt did not send again: the server held them
	ResumeRefused    uint64 // answers to a resume query refused: beyond what was sent, or the request
	// Large messages, server side.
	LargeRefused uint64 // fragments or large responses refused: over a limit, out of order, inconsistent
	// LargeRefusedPerHost counts those of LargeRefused refused because
	// the large messages of their client host held its share
	// (LargeMessageBytesPerHost, or a fifth of the messages).
	LargeRefusedPerHost uint64
	LargeExpired        uint64 // large messages dropped after MessageTimeout without progress
	LargeBytes          int    // bytes of large messages held now
	FragmentsAgain      uint64 // fragments of exactly-once requests held already, acknowledged again (a newer attempt's)
	// Use from other goroutines.
	SubmitFull uint64 // Submit refused: the submit queue was full
	NotOwner   uint64 // owner-only methods refused: called by a second goroutine
}

type counters struct {
	requestsSent, retries, responses, failed, resets, stale atomic.Uint64
	served, responsesSent, bad, busy                        atomic.Uint64
	dups, inProgress, staleDups, full, expired, acked       atomic.Uint64
	submitFull, notOwner, lost, ticketsDropped              atomic.Uint64
	largeRefused, largeExpired                              atomic.Uint64
	fullPerHost, largeRefusedPerHost                        atomic.Uint64
	fragSent, fragSkipped, resumeRefused, fragAgain         atomic.Uint64
}

// Stats returns a snapshot of the Rpc's counters. Any goroutine may call
// it.
func (r *Rpc) Stats() Stats {
	c := &r.stats
	st := Stats{
		RequestsSent:        c.requestsSent.Load(),
		Retries:             c.retries.Load(),
		ResponsesReceived:   c.responses.Load(),
		RequestsFailed:      c.failed.Load(),
		SessionResets:       c.resets.Load(),
		StaleMessages:       c.stale.Load(),
		RequestsServed:      c.served.Load(),
		ResponsesSent:       c.responsesSent.Load(),
		BadMessages:         c.bad.Load(),
		ServerBusy:          c.busy.Load(),
		Duplicates:          c.dups.Load(),
		InProgressDups:      c.inProgress.Load(),
		StaleDups:           c.staleDups.Load(),
		RecordsFull:         c.full.Load(),
		RecordsFullPerHost:  c.fullPerHost.Load(),
		RecordsExpired:      c.expired.Load(),
		RecordsAcked:        c.acked.Load(),
		SubmitFull:          c.submitFull.Load(),
		ResponsesLost:       c.lost.Load(),
		TicketsDropped:      c.ticketsDropped.Load(),
		LargeRefused:        c.largeRefused.Load(),
		LargeRefusedPerHost: c.largeRefusedPerHost.Load(),
		LargeExpired:        c.largeExpired.Load(),
		FragmentsSent:       c.fragSent.Load(),
		FragmentsSkipped:    c.fragSkipped.Load(),
		ResumeRefused:       c.resumeRefused.Load(),
		FragmentsAgain:      c.fragAgain.Load(),
		NotOwner:            c.notOwner.Load(),
	}
	r.srvMu.Lock()
	st.ServerSessions = r.srvLive
	r.srvMu.Unlock()
	st.Records, st.RecordBytes, st.RecordsReserved = r.eo.usage()
	r.large.mu.Lock()
	st.LargeBytes = r.large.bytes
	r.large.mu.Unlock()
	return st
}
