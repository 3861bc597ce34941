package erpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/homa-go/homa/sock"
)

// request is one application request, from EnqueueRequest to its
// continuation. Requests are recycled per Rpc.
type request struct {
	s       *session
	slot    int // index in s.slots, or -1 while queued
	reqType uint8
	eo      bool
	retry   uint16 // attempts sent so far, less one
	seq     uint64 // exactly-once sequence, given when first sent
	homaID  uint64 // transport RPC of the current attempt; 0 when none
	req     *MsgBuffer
	resp    *MsgBuffer
	cont    Continuation
	tag     any
	link    dlink[request] // in Rpc.attempts while an exactly-once attempt waits
	hold    *seqHold       // its sequence, open in the stream (exactly-once, once started)
	// lx is the large exchange of the current attempt: fragments of the
	// request or pulls of the response in flight. Nil until the request
	// or its response is found large.
	lx     *largeXfer
	ticket *Ticket // resumed under this ticket, until started
	sent   bool    // an attempt went out
	frags  int     // fragments of the request its attempts sent: always the first ones
	base   uint16  // retry of its first attempt: a resumed request's earlier attempts
}

// EnqueueRequest sends the request in req to the session's server, to be
// handled by its handler for reqType; the response is copied into resp
// (which grows if needed) and cont runs in the event loop with tag. If the
// session's window is full, or it is still connecting, the request waits
// in the session's queue. Requests of a session complete in any order.
//
// req and resp belong to the layer until cont runs. An error returned
// here means the request was not taken (cont will not run): a bad or dead
// session, a full queue, buffers in use, or a closed Rpc.
func (r *Rpc) EnqueueRequest(s Session, reqType uint8, req, resp *MsgBuffer, cont Continuation, tag any, opts ...ReqOption) error {
	held, err := r.acquire("EnqueueRequest")
	if err != nil {
		return err
	}
	defer r.release(held)
	_, err = r.enqueue(s, reqType, req, resp, cont, tag, opts)
	return err
}

func (r *Rpc) enqueue(h Session, reqType uint8, req, resp *MsgBuffer, cont Continuation, tag any, opts []ReqOption) (*request, error) {
	if r.closed.Load() {
		return nil, ErrClosed
	}
	s, err := r.session(h)
	if err != nil {
		return nil, err
	}
	switch s.state {
	case sessConnecting, sessConnected:
	default:
		return nil, ErrNotConnected
	}
	if req == nil || resp == nil || req == resp || req.state != bufApp || resp.state != bufApp {
		return nil, ErrBufferInUse
	}
	if cont == nil {
		return nil, errors.New("erpc: nil continuation")
	}
	direct := s.state == sessConnected && s.inflight < len(s.slots) && s.queue.n == 0
	if !direct && s.queue.n >= r.cfg.MaxQueuedRequests {
		return nil, ErrQueueFull
	}
	var eo bool
	var t *Ticket
	for _, o := range opts {
		eo = eo || o.eo
		if o.ticket != nil {
			if t != nil {
				return nil, fmt.Errorf("%w: two Resume options", ErrTicket)
			}
			if err := r.takeTicket(o.ticket, s, reqType); err != nil {
				return nil, err
			}
			t = o.ticket
		}
	}
	if t != nil {
		t.inUse = true // so that it cannot be resumed twice
	}
	q := r.newRequest()
	q.s, q.slot, q.reqType, q.eo = s, -1, reqType, eo
	q.req, q.resp, q.cont, q.tag = req, resp, cont, tag
	q.ticket = t
	req.state, resp.state = bufQueued, bufQueued
	if direct {
		r.start(q)
	} else {
		s.queue.push(q)
	}
	return q, nil
}

func (r *Rpc) newRequest() *request {
	if k := len(r.reqFree); k > 0 {
		q := r.reqFree[k-1]
		r.reqFree = r.reqFree[:k-1]
		return q
	}
	return &request{}
}

// pump sends queued requests while the window has room.
func (r *Rpc) pump(s *session) {
	for s.state == sessConnected && s.inflight < len(s.slots) && s.queue.n > 0 {
		r.start(s.queue.pop())
	}
}

// start gives q a slot and sends its first attempt.
func (r *Rpc) start(q *request) {
	s := q.s
	for i, x := range s.slots {
		if x == nil {
			s.slots[i], q.slot = q, i
			break
		}
	}
	s.inflight++
	if q.eo {
		r.openHold(q, s.st)
	}
	if err := r.transmit(q); err != nil {
		r.complete(q, nil, fmt.Errorf("erpc: send: %w", closedError(err)))
	}
}

// transmit sends an attempt of q (which holds a slot) to the server.
func (r *Rpc) transmit(q *request) error {
	s := q.s
	h := header{kind: kindRequest, reqType: q.reqType, session: s.srvNum, token: s.srvToken}
	var now time.Time
	if q.eo {
		now = time.Now()
		h.flags = flagExactlyOnce
		h.retry, h.clientID, h.seq = q.retry, s.st.id, q.seq
		r.fillAcks(s, &h)
	}
	r.touch(s.st)
	if q.lx != nil {
		r.abortFlights(q)
		q.lx.reset(header{}, 0)
	}
	if q.req.n > MaxMsgSize {
		if err := r.transmitLarge(q, h); err != nil {
			return err
		}
		q.sent = true
	} else {
		id, err := r.sendData(s.remote, q.req.frame(&h), makeCookie(ckData, s.num, q.slot))
		if err != nil {
			return err
		}
		q.homaID, q.sent = id, true
		r.stats.requestsSent.Add(1)
	}
	if q.eo {
		r.attempts.repush(q, now)
	}
	return nil
}

// sendData sends a request frame: into the turn's batch when the event
// loop runs a turn (transmit runs on the owner's goroutine only), at
// once otherwise.
func (r *Rpc) sendData(dst netip.AddrPort, frame []byte, cookie uint64) (uint64, error) {
	if r.inLoop {
		r.txMu.Lock()
		defer r.txMu.Unlock()
		if r.txOpen {
			return r.tx.Send(dst, frame, cookie)
		}
	}
	return r.sock.Send(dst, frame, cookie)
}

// dataResponse handles the outcome of an attempt of the request in slot.
func (r *Rpc) dataResponse(s *session, slot uint32, m *sock.Message) {
	var q *request
	if int(slot) < len(s.slots) {
		q = s.slots[slot]
	}
	var f *flight
	switch {
	case q == nil:
		r.stale(m)
		return
	case q.homaID == m.ID && m.ID != 0:
		q.homaID = 0
	case q.lx != nil:
		fl, ok := q.lx.take(m.ID)
		if !ok {
			r.stale(m)
			return
		}
		f = &fl
	default:
		r.stale(m)
		return
	}
	if m.Err != nil {
		r.abortFlights(q)
		r.attemptFailed(q, m.Err)
		r.pump(s)
		return
	}
	var h header
	n, err := h.Parse(m.Data)
	if f != nil && f.probe {
		step, err := r.resume(q, r.resumeAt(q, &h, err, len(m.Data)-n))
		m.Release()
		if step == largeFail {
			r.complete(q, nil, err)
			r.pump(s)
		}
		return
	}
	switch {
	case err != nil:
	case h.kind != kindResponse || h.reqType != q.reqType && !pullStatus(f, &h):
		err = &ProtocolError{"request answered by another kind of message"}
	case q.eo != (h.flags&flagExactlyOnce != 0) || (q.eo && (h.clientID != s.st.id || h.seq != q.seq)):
		err = &ProtocolError{"response does not match the exactly-once request"}
	}
	if err != nil {
		m.Release()
		r.complete(q, nil, err)
		r.pump(s)
		return
	}
	switch h.status {
	case statusOK:
		switch step, err := r.largeReply(q, f, &h, m.Data[n:]); step {
		case largeMore:
			m.Release()
			return
		case largeFail:
			m.Release()
			r.complete(q, nil, err)
			r.pump(s)
			return
		case largeNo:
			q.resp.setData(m.Data[n:])
		}
		r.stats.responses.Add(1)
		r.complete(q, m, nil)
	case statusNoSession:
		m.Release()
		r.forgotten(s)
		return
	case statusInProgress:
		// Only an attempt already superseded gets this (or a fragment
		// whose place another of the attempt's took); try again when
		// the retry timer says so.
		m.Release()
		r.attempts.repush(q, time.Now())
		return
	case statusRecordsFull, statusServerBusy:
		if q.eo && q.retry > 0 {
			// This attempt was refused, but an earlier one may still
			// reach the server and run: the outcome is not known
			// until an attempt finds the record, or the retries run
			// out. Only a first attempt's refusal means "not run".
			m.Release()
			r.abortFlights(q)
			r.attempts.repush(q, time.Now())
			return
		}
		m.Release()
		r.complete(q, nil, statusError(h.status))
	case statusTooLarge:
		m.Release()
		if q.eo {
			r.complete(q, nil, errResponseTooLarge)
		} else {
			r.complete(q, nil, errServerTooLarge)
		}
	case statusStale:
		m.Release()
		if f != nil && f.pull {
			r.complete(q, nil, errLargeGone)
		} else {
			r.complete(q, nil, ErrStale)
		}
	default:
		m.Release()
		r.complete(q, nil, statusError(h.status))
	}
	r.pump(s)
}

// pullStatus reports whether h answers the pull f with a status alone:
// a pull names no request type (the header carries none for it), so a
// server that no longer holds the response answers with none.
func pullStatus(f *flight, h *header) bool {
	return f != nil && f.pull && h.reqType == 0 && h.status != statusOK
}

// attemptFailed handles an attempt the transport reports failed: a peer
// timeout is the death of the server, unless an exactly-once request has
// retries left; any other failure fails the request alone. An
// exactly-once request is sent again RetryTimeout after its last attempt,
// not at once: a transport that has just declared the host dead fails new
// RPCs to it until it hears from it again.
func (r *Rpc) attemptFailed(q *request, cause error) {
	cause = closedError(cause)
	if errors.Is(cause, sock.ErrPeerTimeout) {
		if q.eo && r.retriesLeft(q) {
			return // still in r.attempts: attemptTimedOut sends it again
		}
		r.resetSession(q.s, cause)
		return
	}
	r.complete(q, nil, fmt.Errorf("erpc: request failed: %w", cause))
}

// attemptTimedOut abandons the current attempt of an exactly-once request
// that got no answer within RetryTimeout, and sends another.
func (r *Rpc) attemptTimedOut(q *request, now time.Time) {
	if q.homaID != 0 {
		_ = r.sock.Abort(q.homaID)
		q.homaID = 0
	}
	r.abortFlights(q)
	if r.retriesLeft(q) {
		r.retry(q)
		return
	}
	s := q.s
	r.complete(q, nil, fmt.Errorf("%w: exactly-once request unanswered after %d attempts", ErrTimeout, int(q.retry-q.base)+1))
	r.pump(s)
}

// retriesLeft reports whether q may be sent again: MaxRetries since it
// was enqueued (a resumed request starts a new count), within what the
// header's retry field counts.
func (r *Rpc) retriesLeft(q *request) bool {
	return int(q.retry-q.base) < r.cfg.ExactlyOnce.MaxRetries && q.retry < maxRetries
}

// retry sends another attempt of an exactly-once request.
func (r *Rpc) retry(q *request) {
	q.retry++
	r.stats.retries.Add(1)
	if err := r.transmit(q); err != nil {
		s := q.s
		r.complete(q, nil, fmt.Errorf("erpc: send: %w", closedError(err)))
		r.pump(s)
	}
}

// complete ends q: it leaves its slot, its buffers go back to the
// application, and its continuation is queued to run. m, if not nil, is
// the response, released here.
func (r *Rpc) complete(q *request, m *sock.Message, err error) {
	s := q.s
	if q.slot >= 0 {
		s.slots[q.slot] = nil
		s.inflight--
	}
	sent := q.link.at // when the last attempt went out: a stamp for the ack timer
	r.attempts.remove(q)
	r.abortFlights(q) // acknowledgments of fragments still coming, or pulls after a failure
	if m != nil {
		m.Release()
	}
	ran := err == nil || errors.Is(err, ErrMessageTooLarge) || errors.Is(err, ErrResponseLost)
	if q.hold != nil {
		err = r.finishHold(q, err)
	} else if t := q.ticket; t != nil {
		// Never started: the ticket stays usable.
		q.ticket, t.inUse = nil, false
	}
	if q.eo && q.seq != 0 && ran {
		// The server ran the request and keeps its record: acknowledge.
		r.queueAck(s, q.seq, q.retry, sent)
	} else if q.eo && q.seq != 0 && s.state == sessConnected {
		r.ackIfDue(s, sent) // the floor may move past q
	}
	if err != nil {
		r.stats.failed.Add(1)
	}
	q.req.state, q.resp.state = bufApp, bufApp
	r.pending = append(r.pending, deferred{cont: q.cont, resp: q.resp, tag: q.tag, err: err})
	*q = request{}
	r.reqFree = append(r.reqFree, q)
}

// isReset reports whether err is already a session reset.
func isReset(err error) bool { return errors.Is(err, ErrSessionReset) }

// callState is what a Call waits for.
type callState struct {
	done bool
	err  error
}

func callDone(_ *MsgBuffer, tag any, err error) {
	st := tag.(*callState)
	st.done, st.err = true, err
}

// Call sends req on session s and waits for the response, running the
// event loop meanwhile (so handlers and other continuations of the Rpc
// run too). It is the blocking form of EnqueueRequest, for the owning
// goroutine, outside the event loop. If ctx ends first, the request is
// abandoned and ctx.Err() returned; an exactly-once request may then have
// run or not. The response is a new slice owned by the caller.
func (r *Rpc) Call(ctx context.Context, s Session, reqType uint8, req []byte, opts ...ReqOption) ([]byte, error) {
	held, err := r.acquire("Call")
	if err != nil {
		return nil, err
	}
	defer r.release(held)
	if r.inLoop {
		return nil, ErrInEventLoop
	}
	if len(req) > r.cfg.MaxMessage {
		return nil, ErrMessageTooLarge
	}
	rb, _ := r.pool.get(len(req))
	copy(rb.Data(), req)
	resp, _ := r.pool.get(0)
	defer func() {
		r.pool.put(rb)
		r.pool.put(resp)
	}()
	st := &callState{}
	var q *request
	q, err = r.enqueue(s, reqType, rb, resp, callDone, st, opts)
	if err != nil {
		return nil, err
	}
	err = r.loop(ctx, time.Time{}, func() bool { return st.done })
	r.drain()
	if !st.done {
		if err == nil {
			err = ctx.Err()
		}
		r.cancel(q, err)
		r.drain()
		return nil, callIncomplete(err, st.err)
	}
	if st.err != nil {
		return nil, st.err
	}
	return bytes.Clone(resp.Data()), nil
}

// cancel ends a pending request with err, aborting its transport RPC.
func (r *Rpc) cancel(q *request, err error) {
	s := q.s
	if q.s == nil {
		return // completed meanwhile
	}
	if q.slot < 0 {
		s.queue.remove(q)
	} else if q.homaID != 0 {
		_ = r.sock.Abort(q.homaID)
	}
	r.abortFlights(q)
	r.complete(q, nil, err)
	r.pump(s)
}
