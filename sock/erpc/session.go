package erpc

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/homa-go/homa/sock"
)

// Session names a client session of an Rpc: a connection to one remote
// Rpc, over which requests go out and responses come back. The zero value
// names none. A Session stays valid until DestroySession; afterwards its
// number may be reused, but never with the same value.
type Session struct {
	num, gen uint32
}

func (s Session) String() string { return fmt.Sprintf("session %d.%d", s.num, s.gen) }

// sessState is where a client session is in its life.
type sessState uint8

const (
	sessFree          sessState = iota // unused
	sessConnecting                     // connect sent, requests queue
	sessConnected                      // requests flow
	sessDisconnecting                  // disconnect sent
	sessDead                           // connect failed or reset: refuses requests until destroyed
)

// session is the client side of a session.
type session struct {
	num, gen  uint32
	state     sessState
	nexus     netip.AddrPort // the remote Nexus
	remoteRpc uint8
	remote    netip.AddrPort // the remote Rpc's socket, from the connect reply
	srvNum    uint32         // the server's session number and token
	srvToken  uint32

	ctlID   uint64 // transport RPC of the control message in flight, if any
	ctlKind cookieKind

	slots     []*request // the window: outstanding requests
	nextMsgID uint32     // the last large request's message id
	inflight  int
	queue     reqQueue // requests waiting for a slot (or for the connect)

	// The lease and exactly-once identity, shared by the Rpc's sessions
	// to the same Nexus; the acknowledgments due to the server.
	st        *stream
	ackq      [ackQueueLen]ackEntry
	ackHead   int
	ackN      int
	floorSent uint64

	ackLink  dlink[session]
	connLink dlink[session]
}

func (s *session) handle() Session { return Session{s.num, s.gen} }

// cookieKind tells what a response answers; it is the top byte of the
// cookie given to sock.Send. The next 24 bits hold the session number,
// the low 32 the slot.
type cookieKind uint8

const (
	ckData cookieKind = iota + 1
	ckConnect
	ckDisconnect
	ckAck
)

func makeCookie(k cookieKind, num uint32, slot int) uint64 {
	return uint64(k)<<56 | uint64(num&0xFFFFFF)<<32 | uint64(uint32(slot))
}

func splitCookie(c uint64) (k cookieKind, num uint32, slot uint32) {
	return cookieKind(c >> 56), uint32(c>>32) & 0xFFFFFF, uint32(c)
}

// CreateSession starts a session to the Rpc remoteRpc of the Nexus at
// remote. It returns at once; the session-management handler later gets
// Connected or ConnectFailed. Requests may be enqueued meanwhile: they go
// out when the session connects, and fail if it does not.
func (r *Rpc) CreateSession(remote netip.AddrPort, remoteRpc uint8) (Session, error) {
	held, err := r.acquire("CreateSession")
	if err != nil {
		return Session{}, err
	}
	defer r.release(held)
	if r.closed.Load() {
		return Session{}, ErrClosed
	}
	if !remote.Addr().IsValid() || remote.Port() == 0 || remote.Port() > maxServerPort {
		return Session{}, fmt.Errorf("erpc: Nexus address %v: %w", remote, sock.ErrBadAddress)
	}
	if r.live >= r.cfg.MaxSessions {
		return Session{}, ErrTooManySessions
	}
	s := r.allocSession()
	s.state = sessConnecting
	s.nexus, s.remoteRpc = remote, remoteRpc
	s.st = r.streamTo(remote)
	s.st.sessions++
	if err := r.sendConnect(s); err != nil {
		r.freeSession(s)
		return Session{}, fmt.Errorf("erpc: connect to %v: %w", remote, closedError(err))
	}
	r.conns.push(s, time.Now())
	return s.handle(), nil
}

// sendConnect sends the connect request of s, under its stream's client
// id.
func (r *Rpc) sendConnect(s *session) error {
	h := header{kind: kindConnect, session: s.num, token: s.gen}
	body := connectBody{dstRpc: s.remoteRpc, srcRpc: r.id, fresh: s.st.ref == nil, clientID: s.st.id}
	var b [connectLen]byte
	msg := body.Append(h.Append(b[:0]))
	id, err := r.sock.Send(s.nexus, msg, makeCookie(ckConnect, s.num, 0))
	if err != nil {
		return err
	}
	s.ctlID, s.ctlKind = id, ckConnect
	return nil
}

// reconnectFresh sends the connect of s again under a new client id, the
// server having refused its stream's as expired (the server restarted, or
// the lease went while the client had nothing in flight). Nothing of s
// has been sent under the old id, so nothing is lost. It reports whether
// the connect went.
func (r *Rpc) reconnectFresh(s *session) bool {
	if s.st.ref == nil {
		return false // a fresh id refused: not an old lease
	}
	r.retire(s.st)
	r.leaveStream(s.st)
	s.st = r.streamTo(s.nexus)
	s.st.sessions++
	if r.sendConnect(s) != nil {
		return false
	}
	r.conns.push(s, time.Now())
	return true
}

// allocSession takes a free session number.
func (r *Rpc) allocSession() *session {
	var s *session
	if k := len(r.freeNums); k > 0 {
		s = r.sessions[r.freeNums[k-1]]
		r.freeNums = r.freeNums[:k-1]
	} else {
		s = &session{num: uint32(len(r.sessions)), slots: make([]*request, r.cfg.SessionWindow)}
		r.sessions = append(r.sessions, s)
	}
	s.gen++
	if s.gen == 0 {
		s.gen = 1
	}
	r.live++
	return s
}

// freeSession returns a session with nothing pending to the free list.
func (r *Rpc) freeSession(s *session) {
	r.acks.remove(s)
	r.conns.remove(s)
	if s.st != nil {
		r.leaveStream(s.st)
	}
	*s = session{num: s.num, gen: s.gen, slots: s.slots, queue: s.queue}
	s.queue.reset()
	r.freeNums = append(r.freeNums, s.num)
	r.live--
}

// session finds the live session h names.
func (r *Rpc) session(h Session) (*session, error) {
	if h.gen == 0 || int(h.num) >= len(r.sessions) {
		return nil, ErrNoSession
	}
	s := r.sessions[h.num]
	if s.gen != h.gen || s.state == sessFree {
		return nil, ErrNoSession
	}
	return s, nil
}

// IsConnected reports whether the session is connected.
func (r *Rpc) IsConnected(h Session) bool {
	defer r.release(r.mustAcquire("IsConnected"))
	s, err := r.session(h)
	return err == nil && s.state == sessConnected
}

// DestroySession ends a session. A session with requests pending is
// refused with ErrSessionBusy. A connected session tells its server,
// which frees its state, and the handler gets Disconnected when the
// server has answered; a session that failed to connect or was reset is
// freed at once, without an event.
func (r *Rpc) DestroySession(h Session) error {
	held, err := r.acquire("DestroySession")
	if err != nil {
		return err
	}
	defer r.release(held)
	s, err := r.session(h)
	if err != nil {
		return err
	}
	switch s.state {
	case sessDead:
		r.freeSession(s)
		return nil
	case sessDisconnecting:
		return nil
	}
	if s.inflight > 0 || s.queue.n > 0 {
		return ErrSessionBusy
	}
	if s.ctlID != 0 {
		_ = r.sock.Abort(s.ctlID) // a connect or an acknowledgment
		s.ctlID = 0
	}
	if s.state == sessConnecting {
		r.freeSession(s)
		r.pending = append(r.pending, deferred{sm: true, ev: Disconnected, sess: h})
		return nil
	}
	r.acks.remove(s)
	hd := header{kind: kindDisconnect, session: s.srvNum, token: s.srvToken}
	body := disconnectBody{dstRpc: s.remoteRpc}
	var b [disconnectLen]byte
	msg := body.Append(hd.Append(b[:0]))
	id, err := r.sock.Send(s.nexus, msg, makeCookie(ckDisconnect, s.num, 0))
	if err != nil {
		r.freeSession(s)
		r.pending = append(r.pending, deferred{sm: true, ev: Disconnected, sess: h, err: closedError(err)})
		return nil
	}
	s.state = sessDisconnecting
	s.ctlID, s.ctlKind = id, ckDisconnect
	return nil
}

// handleResponse takes a response (or a transport failure) for one of the
// Rpc's client RPCs.
func (r *Rpc) handleResponse(m *sock.Message) {
	k, num, slot := splitCookie(m.Cookie)
	var s *session
	if int(num) < len(r.sessions) {
		s = r.sessions[num]
	}
	if s == nil || s.state == sessFree {
		r.stale(m)
		return
	}
	if k == ckData {
		r.dataResponse(s, slot, m)
		return
	}
	if s.ctlID != m.ID || s.ctlKind != k {
		r.stale(m)
		return
	}
	s.ctlID = 0
	switch k {
	case ckConnect:
		r.connectResponse(s, m)
	case ckDisconnect:
		r.disconnectResponse(s, m)
	case ckAck:
		r.ackResponse(s, m)
	default:
		r.stale(m)
	}
}

// stale drops a message that answers nothing pending.
func (r *Rpc) stale(m *sock.Message) {
	r.stats.stale.Add(1)
	m.Release()
}

// connectResponse completes the handshake, one way or the other.
func (r *Rpc) connectResponse(s *session, m *sock.Message) {
	defer m.Release()
	r.conns.remove(s)
	if s.state != sessConnecting {
		return
	}
	if m.Err != nil {
		r.connectFailed(s, fmt.Errorf("%w: %w", ErrConnectFailed, closedError(m.Err)))
		return
	}
	var h header
	var body connectReplyBody
	_, err := h.Parse(m.Data)
	switch {
	case err != nil:
	case h.kind != kindConnectReply || h.flags != 0:
		err = &ProtocolError{"connect answered by another kind of message"}
	case h.status != statusOK:
		err = statusError(h.status)
	default:
		_, err = body.Parse(m.Data)
	}
	if err != nil {
		if h.status == statusLeaseExpired && r.reconnectFresh(s) {
			return // still connecting, under a new client id
		}
		r.connectFailed(s, fmt.Errorf("%w: %w", ErrConnectFailed, err))
		return
	}
	r.connected(s.st, time.Duration(body.leaseMs)*time.Millisecond)
	s.remote = netip.AddrPortFrom(s.nexus.Addr(), body.port)
	s.srvNum, s.srvToken = h.session, h.token
	s.state = sessConnected
	r.event(s, Connected, nil)
	r.pump(s)
}

// connectTimedOut gives up on a connect that got no reply in time.
func (r *Rpc) connectTimedOut(s *session) {
	if s.state != sessConnecting {
		return
	}
	if s.ctlID != 0 {
		_ = r.sock.Abort(s.ctlID)
		s.ctlID = 0
	}
	r.connectFailed(s, fmt.Errorf("%w: %w: no reply within %v", ErrConnectFailed, ErrTimeout, r.cfg.ConnectTimeout))
}

// connectFailed fails the requests queued on s and tells the handler.
func (r *Rpc) connectFailed(s *session, err error) {
	s.state = sessDead
	r.failSession(s, err)
	r.event(s, ConnectFailed, err)
}

// disconnectResponse frees the session whatever the server said: a
// server that does not know the session any more has nothing to free.
func (r *Rpc) disconnectResponse(s *session, m *sock.Message) {
	defer m.Release()
	var err error
	if m.Err != nil {
		err = closedError(m.Err)
	} else {
		var h header
		if _, perr := h.Parse(m.Data); perr != nil {
			err = perr
		} else if h.kind != kindDisconnectReply {
			err = &ProtocolError{"disconnect answered by another kind of message"}
		} else if h.status != statusOK && h.status != statusNoSession {
			err = statusError(h.status)
		}
	}
	hd := s.handle()
	r.freeSession(s)
	r.pending = append(r.pending, deferred{sm: true, ev: Disconnected, sess: hd, err: err})
}

// resetSession declares the session's server dead (or the session lost
// there): the session's transport RPCs are aborted, so that the transport
// holds nothing of them, then every pending request fails with
// ErrSessionReset (wrapping cause) and the handler gets Reset.
func (r *Rpc) resetSession(s *session, cause error) {
	if s.state != sessConnected {
		return
	}
	s.state = sessDead
	r.stats.resets.Add(1)
	err := cause
	if !isReset(cause) {
		err = fmt.Errorf("%w: %w", ErrSessionReset, cause)
	}
	if s.ctlID != 0 {
		_ = r.sock.Abort(s.ctlID)
		s.ctlID = 0
	}
	r.acks.remove(s)
	r.failSession(s, err)
	r.event(s, Reset, err)
}

// forgotten resets a session its server does not know: its lease
// expired (the heartbeats said so, or nothing else explains it: the
// server restarted, or its Rpc did). New sessions to the Nexus get a new
// client id.
func (r *Rpc) forgotten(s *session) {
	r.retire(s.st)
	if s.st.ref != nil && s.st.ref.expired.Load() {
		r.resetSession(s, fmt.Errorf("%w: %w", ErrSessionReset, ErrLeaseExpired))
		return
	}
	r.resetSession(s, fmt.Errorf("%w: the server does not know the session: "+
		"its lease expired (nothing heard for the server's LeaseTimeout) or the server restarted", ErrSessionReset))
}

// failSession fails every request of s, outstanding or queued, with err.
func (r *Rpc) failSession(s *session, err error) {
	for _, q := range s.slots {
		if q == nil {
			continue
		}
		if q.homaID != 0 {
			_ = r.sock.Abort(q.homaID)
		}
		r.complete(q, nil, err) // aborts the flights of a large exchange too
	}
	for q := s.queue.pop(); q != nil; q = s.queue.pop() {
		r.complete(q, nil, err)
	}
}

// reqQueue is a FIFO ring of requests; it grows by doubling.
type reqQueue struct {
	buf     []*request
	head, n int
}

func (q *reqQueue) push(x *request) {
	if q.n == len(q.buf) {
		nb := make([]*request, max(8, 2*len(q.buf)))
		for i := range q.n {
			nb[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = nb, 0
	}
	q.buf[(q.head+q.n)%len(q.buf)] = x
	q.n++
}

func (q *reqQueue) pop() *request {
	if q.n == 0 {
		return nil
	}
	x := q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	return x
}

// remove takes x out of the queue, keeping the order of the rest.
func (q *reqQueue) remove(x *request) bool {
	for i := range q.n {
		if q.buf[(q.head+i)%len(q.buf)] != x {
			continue
		}
		for j := i; j < q.n-1; j++ {
			q.buf[(q.head+j)%len(q.buf)] = q.buf[(q.head+j+1)%len(q.buf)]
		}
		q.buf[(q.head+q.n-1)%len(q.buf)] = nil
		q.n--
		return true
	}
	return false
}

func (q *reqQueue) reset() {
	clear(q.buf)
	q.head, q.n = 0, 0
}
