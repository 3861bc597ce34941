package erpc

import (
	"fmt"
	"time"
)

// The client side of large messages (see large.go): a request larger
// than MaxMsgSize goes in fragments, up to FragmentWindow of them in
// flight, the next sent as each is acknowledged; a response larger than
// one Homa message is pulled, up to FragmentWindow pulls in flight, into
// the response buffer, each fragment written at its place as it comes.

// flight is a transport RPC of a large exchange: a fragment of the
// request, or a pull of a fragment of the response.
type flight struct {
	id    uint64
	idx   int
	pull  bool
	probe bool // the resume query of an attempt sent again
}

// largeXfer is the state of a request whose request or response is
// large, for its current attempt.
//
// The window is a span: a fragment (or pull) goes out only within
// FragmentWindow fragments of the first one not yet acknowledged (or
// received), so a slow fragment holds the others back rather than let
// them run beyond the window the server takes (MaxFragmentWindow).
type largeXfer struct {
	hdr    header // the request's header, the fragment fields set per fragment
	nfrag  int    // fragments of the request (0: it is small)
	next   int    // the next fragment of the request to send
	acked  []bool // the request's fragments acknowledged
	lo     int    // the first fragment of the request not acknowledged
	total  int    // of the large response, 0 until its first fragment
	respID uint32 // the server's message id of the response
	nresp  int    // fragments of the response
	pull   int    // the next fragment of the response to pull
	have   int    // fragments of the response arrived
	got    []bool // which
	plo    int    // the first fragment of the response not arrived
	asking bool   // the resume query is in flight: no fragment goes yet
	fl     []flight
}

// reset readies x for an attempt of a request with header h, n bytes.
func (x *largeXfer) reset(h header, n int) {
	acked, got, fl := x.acked[:0], x.got[:0], x.fl[:0]
	*x = largeXfer{hdr: h, acked: acked, got: got, fl: fl}
	if n > MaxMsgSize {
		x.nfrag = fragments(n)
		x.acked = append(x.acked, make([]bool, x.nfrag)...)
	}
}

// mark records the arrival of fragment i in have and moves the first
// missing index lo past what has arrived.
func mark(have []bool, i int, lo *int) {
	have[i] = true
	for *lo < len(have) && have[*lo] {
		*lo++
	}
}

// take removes the flight of transport RPC id and returns it.
func (x *largeXfer) take(id uint64) (flight, bool) {
	for i, f := range x.fl {
		if f.id == id {
			x.fl[i] = x.fl[len(x.fl)-1]
			x.fl = x.fl[:len(x.fl)-1]
			return f, true
		}
	}
	return flight{}, false
}

// abortFlights aborts the transport RPCs of q's large exchange.
func (r *Rpc) abortFlights(q *request) {
	if q.lx == nil {
		return
	}
	for _, f := range q.lx.fl {
		_ = r.sock.Abort(f.id)
	}
	q.lx.fl = q.lx.fl[:0]
}

// abortFragments stops sending q's request: its fragments in flight are
// aborted and no more go out.
func (r *Rpc) abortFragments(q *request) {
	x := q.lx
	fl := x.fl[:0]
	for _, f := range x.fl {
		if f.pull {
			fl = append(fl, f)
		} else {
			_ = r.sock.Abort(f.id)
		}
	}
	x.fl = fl
	x.next = x.nfrag
}

// transmitLarge sends the first fragments of q's large request, with
// header h (an exactly-once one with its acknowledgments filled in).
func (r *Rpc) transmitLarge(q *request, h header) error {
	if q.lx == nil {
		q.lx = &largeXfer{}
	}
	r.abortFlights(q)
	if !q.eo {
		q.s.nextMsgID++
		h.msgID = q.s.nextMsgID
	}
	h.flags |= flagFragment
	h.total = uint32(q.req.n)
	q.lx.reset(h, q.req.n)
	q.resp.n = 0
	if q.eo && q.frags > 0 {
		return r.askResume(q)
	}
	return r.fillWindow(q)
}

// askResume sends the resume query of an attempt of q's exactly-once
// request after earlier attempts sent q.frags fragments, which the
// server may hold: a pull at offset 0 (see serveResume). The fragments
// wait for its answer.
func (r *Rpc) askResume(q *request) error {
	id, err := r.sendPull(q, 0)
	if err != nil {
		return err
	}
	q.lx.asking = true
	q.lx.fl = append(q.lx.fl, flight{id: id, probe: true})
	r.stats.requestsSent.Add(1)
	return nil
}

// resumeAt returns the fragment at which the attempt of q resumes, from
// the answer to its resume query (header h, parsed if perr is nil, with
// ndata bytes of data): the first fragment the server misses. A status
// other than OK (a server of an older version answers stale) starts from
// the first fragment. A claim beyond the fragments the client sent, or
// not of this request, is refused and counted, and starts from the first
// fragment too: the server's records still keep the request from running
// twice.
func (r *Rpc) resumeAt(q *request, h *header, perr error, ndata int) int {
	if perr == nil && h.kind == kindResponse && h.status != statusOK {
		return 0
	}
	x := q.lx
	switch {
	case perr != nil || h.kind != kindResponse || h.flags != flagExactlyOnce|flagFragment || ndata != 0:
	case h.clientID != q.s.st.id || h.seq != q.seq:
	case h.fragOff == 0 && h.total == 0:
		return 0 // nothing held
	case int(h.total) != q.req.n || h.reqType != q.reqType:
	default:
		if i := int(h.fragOff) / fragChunk; i <= q.frags && i < x.nfrag {
			return i
		}
	}
	r.stats.resumeRefused.Add(1)
	return 0
}

// resume starts the fragments of q's attempt at fragment from: those
// before it the server holds.
func (r *Rpc) resume(q *request, from int) (largeStep, error) {
	x := q.lx
	x.asking = false
	for i := range from {
		x.acked[i] = true
	}
	x.lo, x.next = from, from
	r.stats.fragSkipped.Add(uint64(from))
	return r.more(q)
}

// fillWindow sends fragments of the request, or else pulls of the
// response, while q's window has room.
func (r *Rpc) fillWindow(q *request) error {
	x := q.lx
	for !x.asking && len(x.fl) < r.cfg.FragmentWindow {
		var id uint64
		var err error
		var f flight
		w := r.cfg.FragmentWindow
		switch {
		case x.total == 0 && x.next < x.nfrag && x.next < x.lo+w:
			f = flight{idx: x.next}
			id, err = r.sendFragment(q, x.next)
			x.next++
			q.frags = max(q.frags, x.next)
			r.stats.fragSent.Add(1)
		case x.total != 0 && x.pull < x.nresp && x.pull < x.plo+w:
			f = flight{idx: x.pull, pull: true}
			id, err = r.sendPull(q, x.pull)
			x.pull++
		default:
			return nil
		}
		if err != nil {
			return err
		}
		f.id = id
		x.fl = append(x.fl, f)
		r.stats.requestsSent.Add(1)
		if len(x.fl) > r.fragPeak {
			r.fragPeak = len(x.fl)
		}
	}
	return nil
}

// sendFragment sends fragment i of q's request.
func (r *Rpc) sendFragment(q *request, i int) (uint64, error) {
	h := q.lx.hdr
	off := i * fragChunk
	end := min(off+fragChunk, q.req.n)
	h.fragOff = uint32(off)
	// In place: the header goes in the bytes before the fragment (the
	// room before the data, for the first), put back once the transport
	// has copied the frame. The buffer is the layer's while the request
	// is pending, and only the event loop sends.
	at := maxHeaderLen + off
	start := at - h.Len()
	var save [maxHeaderLen]byte
	copy(save[:], q.req.buf[start:at])
	h.put(q.req.buf[start:at])
	id, err := r.sock.Send(q.s.remote, q.req.buf[start:maxHeaderLen+end], makeCookie(ckData, q.s.num, q.slot))
	copy(q.req.buf[start:at], save[:])
	return id, err
}

// sendPull asks for fragment i of q's large response.
func (r *Rpc) sendPull(q *request, i int) (uint64, error) {
	s := q.s
	h := header{kind: kindPull, flags: flagFragment, session: s.srvNum, token: s.srvToken, fragOff: uint32(i * fragChunk)}
	if q.eo {
		h.flags |= flagExactlyOnce
		h.clientID, h.seq = s.st.id, q.seq
	} else {
		h.msgID = q.lx.respID
	}
	r.pullHdr = h.Append(r.pullHdr[:0]) // the transport copies it: one buffer serves
	return r.sock.Send(s.remote, r.pullHdr, makeCookie(ckData, s.num, q.slot))
}

// largeStep is what a large exchange does with a successful reply.
type largeStep uint8

const (
	largeNo   largeStep = iota // not part of a large exchange: an ordinary response
	largeMore                  // the exchange goes on
	largeDone                  // the large response is complete in q.resp
	largeFail                  // the reply broke the exchange; err says how
)

// largeReply takes a successful reply (header h, data) to q, which came
// on flight f if q's exchange is large (else f is nil).
func (r *Rpc) largeReply(q *request, f *flight, h *header, data []byte) (largeStep, error) {
	x := q.lx
	frag := h.flags&flagFragment != 0
	switch {
	case f != nil && !f.pull && frag && len(data) == 0:
		// The acknowledgment of a fragment of the request.
		if h.msgID != x.hdr.msgID || int(h.fragOff) != f.idx*fragChunk || int(h.total) != q.req.n {
			return largeFail, &ProtocolError{"fragment acknowledgment does not match the fragment"}
		}
		mark(x.acked, f.idx, &x.lo)
		return r.more(q)
	case f != nil && f.pull:
		if !frag || int(h.fragOff) != f.idx*fragChunk || int(h.total) != x.total || !q.eo && h.msgID != x.respID {
			return largeFail, &ProtocolError{"fragment of a large response out of place"}
		}
	case !frag:
		if x != nil && x.total != 0 {
			return largeFail, &ProtocolError{"a fragment of a large response expected"}
		}
		return largeNo, nil // a small response
	default:
		// The first fragment of a large response.
		total := int(h.total)
		switch {
		case x != nil && x.total != 0:
			return largeFail, &ProtocolError{"a large response started twice"}
		case total > r.cfg.MaxMessage:
			return largeFail, fmt.Errorf("%w: the server's response is %d bytes, Config.MaxMessage %d", ErrMessageTooLarge, total, r.cfg.MaxMessage)
		case h.fragOff != 0 || total <= MaxMsgSize:
			return largeFail, &ProtocolError{"large response not starting at its first fragment"}
		}
		if x == nil {
			q.lx = &largeXfer{}
			x = q.lx
		}
		// The request is through (or was answered from a record): the
		// other fragments' replies say nothing more.
		r.abortFragments(q)
		x.total, x.respID, x.nresp, x.pull, x.plo = total, h.msgID, fragments(total), 1, 0
		x.got = append(x.got[:0], make([]bool, x.nresp)...)
		q.resp.n = 0
	}
	i := int(h.fragOff) / fragChunk
	if len(data) != min(fragChunk, x.total-int(h.fragOff)) || x.got[i] {
		return largeFail, &ProtocolError{"fragment of a large response of the wrong length, or repeated"}
	}
	mark(x.got, i, &x.plo)
	x.have++
	q.resp.writeAt(int(h.fragOff), data, x.total)
	if x.have == x.nresp {
		return largeDone, nil
	}
	return r.more(q)
}

// more fills q's window after progress.
func (r *Rpc) more(q *request) (largeStep, error) {
	if err := r.fillWindow(q); err != nil {
		return largeFail, fmt.Errorf("erpc: send: %w", closedError(err))
	}
	if q.eo {
		r.attempts.repush(q, time.Now()) // progress: the attempt lives on
	}
	return largeMore, nil
}
