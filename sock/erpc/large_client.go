package erpc

import "fmt"

// The client side of large messages (see large.go): a request larger
// than MaxMsgSize goes fragment after fragment, each sent when the server
// has acknowledged the one before; a response larger than one Homa
// message is pulled fragment after fragment into the response buffer.

// sendFragment sends the fragment of q's request at q.sendOff.
func (r *Rpc) sendFragment(q *request) (uint64, error) {
	s := q.s
	if q.sendOff == 0 {
		s.nextMsgID++
		q.msgID = s.nextMsgID
	}
	end := min(q.sendOff+fragChunk, q.req.n)
	h := header{kind: kindRequest, reqType: q.reqType, flags: flagFragment, session: s.srvNum, token: s.srvToken,
		msgID: q.msgID, fragOff: uint32(q.sendOff), total: uint32(q.req.n)}
	var frame []byte
	if q.sendOff == 0 {
		start := maxHeaderLen - fragHeaderLen // in place, before the data
		h.put(q.req.buf[start:maxHeaderLen])
		frame = q.req.buf[start : maxHeaderLen+end]
	} else {
		// The transport copies what it is given: one scratch buffer serves.
		r.scratch = append(h.Append(r.scratch[:0]), q.req.Data()[q.sendOff:end]...)
		frame = r.scratch
	}
	return r.sock.Send(s.remote, frame, makeCookie(ckData, s.num, q.slot))
}

// largeStep is what a large exchange does with a successful reply.
type largeStep uint8

const (
	largeNo   largeStep = iota // not part of a large exchange: an ordinary response
	largeMore                  // the next fragment or pull went out
	largeDone                  // the large response is complete in q.resp
	largeFail                  // the reply broke the exchange; err says how
)

// largeReply takes a successful reply (header h, data) to q when q's
// request or response is large.
func (r *Rpc) largeReply(q *request, h *header, data []byte) (largeStep, error) {
	if !q.eo && q.req.n > MaxMsgSize && q.sendOff+fragChunk < q.req.n {
		// The acknowledgment of a fragment that was not the last.
		if h.flags&flagFragment == 0 || h.msgID != q.msgID || int(h.fragOff) != q.sendOff+fragChunk || len(data) != 0 {
			return largeFail, &ProtocolError{"fragment acknowledgment does not match the fragment"}
		}
		q.sendOff += fragChunk
		return r.next(q, r.sendFragment)
	}
	if h.flags&flagFragment == 0 {
		if q.pullTotal != 0 {
			return largeFail, &ProtocolError{"a fragment of a large response expected"}
		}
		return largeNo, nil
	}
	total, off := int(h.total), int(h.fragOff)
	if q.pullTotal == 0 {
		switch {
		case total > r.cfg.MaxMessage:
			return largeFail, fmt.Errorf("%w: the server's response is %d bytes, Config.MaxMessage %d", ErrMessageTooLarge, total, r.cfg.MaxMessage)
		case off != 0 || total <= MaxMsgSize:
			return largeFail, &ProtocolError{"large response not starting at its first fragment"}
		}
		q.pullTotal, q.pullID = total, h.msgID
		q.resp.n = 0
	} else if off != q.resp.n || total != q.pullTotal || h.msgID != q.pullID {
		return largeFail, &ProtocolError{"fragment of a large response out of place"}
	}
	if len(data) != min(fragChunk, total-off) {
		return largeFail, &ProtocolError{"fragment of a large response of the wrong length"}
	}
	q.resp.appendData(data, total)
	if q.resp.n == total {
		return largeDone, nil
	}
	return r.next(q, r.sendPull)
}

// next sends the next message of a large exchange with send.
func (r *Rpc) next(q *request, send func(*request) (uint64, error)) (largeStep, error) {
	id, err := send(q)
	if err != nil {
		return largeFail, fmt.Errorf("erpc: send: %w", closedError(err))
	}
	q.homaID = id
	r.stats.requestsSent.Add(1)
	return largeMore, nil
}

// sendPull asks for the fragment of q's large response at the length it
// has so far.
func (r *Rpc) sendPull(q *request) (uint64, error) {
	s := q.s
	h := header{kind: kindPull, flags: flagFragment, session: s.srvNum, token: s.srvToken, msgID: q.pullID, fragOff: uint32(q.resp.n)}
	var b [fragHeaderLen]byte
	return r.sock.Send(s.remote, h.Append(b[:0]), makeCookie(ckData, s.num, q.slot))
}

// largeOK reports whether a request with opts may be larger than one
// Homa message: not an exactly-once one.
func (r *Rpc) largeOK(opts []ReqOption) bool {
	for _, o := range opts {
		if o.eo {
			return false
		}
	}
	return true
}
