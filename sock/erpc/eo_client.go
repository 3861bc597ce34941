package erpc

import (
	"time"

	"github.com/homa-go/homa/sock"
)

// The client side of exactly-once requests. A session has one client id,
// random, given to the server in the connect request; its exactly-once
// requests take sequence numbers 1, 2, ... in the order they are first
// sent. Every attempt of a request carries the same (client id, sequence)
// and its attempt number.
//
// Acknowledgments tell the server which records it may forget:
//
//   - the ack floor: every sequence below it has completed at the client,
//     which will never send it again. It rides on every exactly-once
//     message of the session. The server forgets the records below it
//     and answers any later copy of them as stale.
//   - one acknowledgment of a single sequence with its retry count, as in
//     the R2P2 report: with it the server forgets a record above the floor
//     (held there by an older request still running) as soon as every copy
//     the client sent has arrived, or keeps a small tombstone until the
//     rest can no longer arrive.
//
// Acknowledgments wait at most AckDelay for a request to carry them; then
// an ack message carries them alone.

// ackQueueLen bounds the single acknowledgments a session holds; when it
// is full the oldest is dropped (the floor or the server's timeout will
// free that record).
const ackQueueLen = 16

type ackEntry struct {
	seq     uint64
	retries uint16
}

// floor is the lowest sequence of the session's stream that has not
// completed at the client.
func (s *session) floor() uint64 { return s.st.floor() }

// pushAck remembers that sequence seq completed after retries retries.
func (s *session) pushAck(seq uint64, retries uint16) {
	if s.ackN == ackQueueLen {
		s.ackHead = (s.ackHead + 1) % ackQueueLen
		s.ackN--
	}
	s.ackq[(s.ackHead+s.ackN)%ackQueueLen] = ackEntry{seq, retries}
	s.ackN++
}

// popAck takes the oldest acknowledgment not below floor; those below it
// are covered by the floor and dropped.
func (s *session) popAck(floor uint64) (ackEntry, bool) {
	for s.ackN > 0 {
		a := s.ackq[s.ackHead]
		s.ackHead = (s.ackHead + 1) % ackQueueLen
		s.ackN--
		if a.seq >= floor {
			return a, true
		}
	}
	return ackEntry{}, false
}

// ackDue reports whether the server has acknowledgments to learn.
func (s *session) ackDue() bool { return s.ackN > 0 || s.floor() > s.floorSent }

// fillAcks puts the floor and one acknowledgment into an exactly-once
// header of s.
func (r *Rpc) fillAcks(s *session, h *header) {
	h.ackFloor = s.floor()
	if a, ok := s.popAck(h.ackFloor); ok {
		h.flags |= flagAck
		h.ackSeq, h.ackRetries = a.seq, a.retries
	}
	s.floorSent = max(s.floorSent, h.ackFloor)
	if !s.ackDue() {
		r.acks.remove(s)
	}
}

// queueAck records the completion of an exactly-once request the server
// ran, to be acknowledged. sent is when its last attempt went out.
func (r *Rpc) queueAck(s *session, seq uint64, retries uint16, sent time.Time) {
	s.pushAck(seq, retries)
	r.ackIfDue(s, sent)
}

// ackIfDue starts the AckDelay timer of s if it has acknowledgments to
// send. The timer counts from since (the send time of the request that
// completed, when known: it saves reading the clock per response, and
// errs on the side of acknowledging early); zero means now.
func (r *Rpc) ackIfDue(s *session, since time.Time) {
	if !s.ackLink.Listed() && s.state == sessConnected && s.ackDue() {
		if since.IsZero() {
			since = time.Now()
		}
		r.acks.push(s, since)
	}
}

// sendAck sends the acknowledgments of s alone, no request having carried
// them within AckDelay. One ack message per session is in flight at most.
func (r *Rpc) sendAck(s *session, now time.Time) {
	if s.state != sessConnected || !s.ackDue() {
		return
	}
	if s.ctlID != 0 {
		// The previous ack message is in flight; its answer re-arms.
		return
	}
	h := header{kind: kindAck, flags: flagExactlyOnce, session: s.srvNum, token: s.srvToken, clientID: s.st.id}
	r.fillAcks(s, &h)
	var b [eoHeaderLen]byte
	id, err := r.sock.Send(s.remote, h.Append(b[:0]), makeCookie(ckAck, s.num, 0))
	if err != nil {
		return // a later request or the server's timeouts will do
	}
	s.ctlID, s.ctlKind = id, ckAck
	_ = now
}

// ackResponse ends an ack message's RPC. Its outcome does not matter: an
// acknowledgment that is lost only keeps a record until its timeout.
func (r *Rpc) ackResponse(s *session, m *sock.Message) {
	m.Release()
	r.ackIfDue(s, time.Time{})
}
