package erpc

import (
	"errors"
	"fmt"
	"time"
)

// A Ticket is the identity (client id and sequence number) of an
// exactly-once request whose outcome the client does not know: its
// session was reset, its attempts ran out, or the Call waiting for it
// ended. The request may have run at the server, or not. Sent again with
// the Resume option, on a session of the same Rpc to the same server
// Nexus (a new session is fine), it is the same request to the server: if
// it ran, its recorded response comes back (or ErrResponseLost, if the
// record could not keep it); if it runs now, it runs once. A Ticket comes
// in the *IncompleteError that fails the request; until it is resumed or
// released it holds the client's ack floor below its sequence, so the
// server keeps its record. It belongs to the Rpc's owner.
type Ticket struct {
	rpc      *Rpc
	st       *stream
	hold     *seqHold // nil once resumed or released
	reqType  uint8
	attempts uint16        // attempts sent so far
	frags    int           // fragments of a large request they sent
	inUse    bool          // a request resumes it and has not started yet
	link     dlink[Ticket] // in Rpc.tickets while it holds its sequence
}

// seqHold keeps a sequence number open in its stream: it holds the ack
// floor at or below it.
type seqHold struct {
	seq  uint64
	t    *Ticket // the ticket holding it, if any
	link dlink[seqHold]
}

// IncompleteError fails an exactly-once request that may or may not have
// run. Err says why (errors.Is sees through); Ticket, if not nil,
// resumes it.
type IncompleteError struct {
	Err    error
	Ticket *Ticket
}

func (e *IncompleteError) Error() string {
	if e.Ticket == nil {
		return e.Err.Error() + " (the exactly-once request may have run)"
	}
	return e.Err.Error() + " (the exactly-once request may have run; resume its ticket to find out)"
}

func (e *IncompleteError) Unwrap() error { return e.Err }

// TicketOf returns the ticket of a failed exactly-once request, if err
// carries one.
func TicketOf(err error) *Ticket {
	var ie *IncompleteError
	if errors.As(err, &ie) {
		return ie.Ticket
	}
	return nil
}

// ReqOption modifies one request.
type ReqOption struct {
	eo     bool
	ticket *Ticket
}

// ExactlyOnce makes a request exactly-once: an attempt that fails by
// timeout is sent again under the same (client id, sequence), and the
// server answers a duplicate from its completion record instead of
// running the handler again. See ExactlyOnceConfig.
var ExactlyOnce = ReqOption{eo: true}

// Resume sends an exactly-once request again under the identity of t,
// which it consumes. The request's type must be the ticket's, and its
// data must be the same: a large request resumes where the server is,
// which may hold fragments of the earlier attempts.
func Resume(t *Ticket) ReqOption { return ReqOption{eo: true, ticket: t} }

// ReleaseTicket gives up on the request of t: its sequence no longer
// holds the ack floor, and the server may forget its record. A ticket
// resumed or released already is ignored.
func (r *Rpc) ReleaseTicket(t *Ticket) {
	defer r.release(r.mustAcquire("ReleaseTicket"))
	if t == nil || t.rpc != r || t.hold == nil || t.inUse {
		return
	}
	r.dropTicket(t)
}

// dropTicket releases the hold of t.
func (r *Rpc) dropTicket(t *Ticket) {
	r.tickets.remove(t)
	t.st.tickets--
	r.closeHold(t.st, t.hold)
	t.hold = nil
	r.endStreamIfIdle(t.st)
}

// ErrTicket: a Resume option that cannot be used: a ticket of another Rpc
// or request type, consumed already, or of a client id whose lease is gone
// (then also ErrLeaseExpired) or another server.
var ErrTicket = errors.New("erpc: ticket not usable here")

// takeTicket checks that t may resume a request of reqType on s.
func (r *Rpc) takeTicket(t *Ticket, s *session, reqType uint8) error {
	switch {
	case t.rpc != r || t.hold == nil || t.inUse:
		return fmt.Errorf("%w: another Rpc's, or resumed or released already", ErrTicket)
	case t.reqType != reqType:
		return fmt.Errorf("%w: request type %d, the ticket's is %d", ErrTicket, reqType, t.reqType)
	case t.st.ref != nil && t.st.ref.expired.Load():
		return fmt.Errorf("%w: %w", ErrTicket, ErrLeaseExpired)
	case s.st != t.st:
		return fmt.Errorf("%w: the session is to another server Nexus, or under a new client id (the old lease is gone)", ErrTicket)
	case t.attempts >= maxRetries:
		return fmt.Errorf("%w: all %d attempts the header can count are spent", ErrTicket, maxRetries)
	}
	return nil
}

// openHold gives q its sequence: the ticket's, or the stream's next.
func (r *Rpc) openHold(q *request, st *stream) {
	if t := q.ticket; t != nil {
		q.ticket = nil
		r.tickets.remove(t)
		q.hold, t.hold, t.inUse = t.hold, nil, false
		q.hold.t = nil
		st.tickets--
		q.retry, q.base, q.frags = t.attempts, t.attempts, t.frags
		q.seq = q.hold.seq
		return
	}
	var h *seqHold
	if k := len(r.holdFree); k > 0 {
		h = r.holdFree[k-1]
		r.holdFree = r.holdFree[:k-1]
	} else {
		h = &seqHold{}
	}
	h.seq = st.nextSeq
	st.nextSeq++
	st.open.push(h, time.Time{})
	q.hold, q.seq = h, h.seq
}

// closeHold ends a hold: its sequence no longer holds the floor.
func (r *Rpc) closeHold(st *stream, h *seqHold) {
	st.open.remove(h)
	*h = seqHold{}
	if len(r.holdFree) < maxFreeHolds {
		r.holdFree = append(r.holdFree, h)
	}
}

// maxFreeHolds bounds the holds kept for reuse per Rpc.
const maxFreeHolds = 4096

// finishHold ends the hold of q as it completes with err. A request that
// may have run (it was sent, and err does not settle it) keeps its
// sequence in a ticket, returned in an *IncompleteError; one that ran or
// certainly did not run gives it up.
func (r *Rpc) finishHold(q *request, err error) error {
	h := q.hold
	q.hold = nil
	st := q.s.st
	if err == nil || !q.sent || settled(err) || errors.Is(err, ErrClosed) {
		r.closeHold(st, h)
		return err
	}
	if errors.Is(err, ErrLeaseExpired) || st.retired && st.ref != nil && st.ref.expired.Load() {
		r.closeHold(st, h)
		return &IncompleteError{Err: err}
	}
	if st.tickets >= r.cfg.ExactlyOnce.MaxTickets {
		r.dropOldestTicket(st)
	}
	t := &Ticket{rpc: r, st: st, hold: h, reqType: q.reqType, attempts: q.retry + 1, frags: q.frags}
	h.t = t
	st.tickets++
	r.tickets.push(t, time.Now())
	return &IncompleteError{Err: err, Ticket: t}
}

// settled reports whether err says what became of an exactly-once
// request: it ran (its response, or the fact, is known) or it was refused
// unexecuted.
func settled(err error) bool {
	for _, e := range []error{ErrMessageTooLarge, ErrResponseLost, ErrStale, ErrRetryable, ErrNoSuchService, ErrProtocol} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// dropOldestTicket releases the ticket with the lowest sequence of st:
// tickets are bounded per stream (ExactlyOnceConfig.MaxTickets).
func (r *Rpc) dropOldestTicket(st *stream) {
	for h := st.open.Front(); h != nil; h = st.open.Next(h) {
		if h.t != nil && !h.t.inUse {
			r.stats.ticketsDropped.Add(1)
			t := h.t
			r.tickets.remove(t)
			st.tickets--
			r.closeHold(st, h)
			t.hold = nil
			return
		}
	}
}

// callIncomplete is the error of a Call whose context ended: for an
// exactly-once request, the *IncompleteError its cancellation produced.
func callIncomplete(ctxErr, contErr error) error {
	if contErr != nil && errors.Is(contErr, ctxErr) {
		return contErr
	}
	return ctxErr
}
