package netrpc

import (
	"fmt"
	"slices"

	"github.com/homa-go/homa/sock"
)

// partWindow is how many Homa RPCs of one large call a client keeps in
// flight: parts of its request being sent, or pulls of its reply. With
// eight (an 8 MB message at once) the median 8 MB echo on loopback took
// 13-14 ms, against 15-24 ms with four and 37-41 ms with two
// (BenchmarkEcho8MB, the polling configurations, one loaded run each);
// Homa's grants and receive memory bound what a server takes in at once.
const partWindow = 8

// largeCall is a call whose request or reply is longer than one Homa
// message, from its first part until the last of its Homa RPCs has
// answered. Its fields are guarded by the codec's largeMu.
type largeCall struct {
	parts    [][]byte // the request's parts (outMsg), until sent
	total    int      // the request's length
	next     int      // the request's next part to send
	inflight int      // Homa RPCs of the call not yet answered
	done     bool     // its response went to net/rpc: later answers are dropped

	// The reply, once its first part has come: its assembly, id, and
	// the offsets asked for and not yet answered.
	reply   *assembler
	replyID uint64
	pulls   []int
	pullAt  int // offset of the next pull to send
}

// sendLarge sends the first parts (from an outMsg, which it takes over)
// of the request of total bytes of the call seq; the rest follow as the
// server acknowledges them.
func (c *ClientCodec) sendLarge(seq uint64, parts [][]byte, total int) error {
	lc := &largeCall{parts: parts, total: total}
	c.largeMu.Lock()
	defer c.largeMu.Unlock()
	c.large[seq] = lc
	c.nlarge.Add(1)
	for lc.inflight < partWindow && lc.parts != nil {
		if err := c.sendPart(seq, lc); err != nil {
			lc.done = true
			c.forget(seq, lc)
			return err
		}
	}
	return nil
}

// sendPart sends the next part of lc's request. The socket takes its
// buffer over.
func (c *ClientCodec) sendPart(seq uint64, lc *largeCall) error {
	b := lc.parts[lc.next]
	putPartHeader(b, kindRequestPart, lc.total, lc.next, seq)
	if _, err := c.s.SendOwned(c.server, b, seq); err != nil {
		return err
	}
	lc.parts[lc.next] = nil
	lc.inflight++
	if lc.next++; lc.next == len(lc.parts) {
		lc.parts = nil // all sent
	}
	return nil
}

// sendPull asks for the reply's next part.
func (c *ClientCodec) sendPull(seq uint64, lc *largeCall) error {
	p := part{kind: kindReplyPull, total: lc.reply.total, offset: lc.pullAt, id: lc.replyID}
	if _, err := c.s.SendOwned(c.server, appendPart(make([]byte, 0, partLen(0)), p), seq); err != nil {
		return err
	}
	lc.inflight++
	lc.pulls = append(lc.pulls, lc.pullAt)
	lc.pullAt += min(partData, lc.reply.total-lc.pullAt)
	return nil
}

// forget drops lc once its response is delivered and every Homa RPC of
// it has answered.
func (c *ClientCodec) forget(seq uint64, lc *largeCall) {
	if lc.done && lc.inflight == 0 {
		if lc.reply != nil {
			lc.reply.free()
		}
		delete(c.large, seq)
		c.nlarge.Add(-1)
	}
}

// takeLarge handles a response that is not simply a whole response to a
// call of one Homa message: an acknowledgment of a request part, a part
// of a reply, or the response to a large call. deliver reports whether
// the call's response is now known: in, or err, which fails the call
// alone. takeLarge releases m unless in holds it.
func (c *ClientCodec) takeLarge(m *sock.Message) (in inbound, deliver bool, err error) {
	seq := m.Cookie
	c.largeMu.Lock()
	defer c.largeMu.Unlock()
	defer func() {
		if lc := c.large[seq]; lc != nil {
			c.forget(seq, lc)
		}
	}()
	lc := c.large[seq]
	if lc != nil {
		lc.inflight--
		if lc.done {
			c.dropped.Add(1) // late: the call is over
			m.Release()
			return inbound{}, false, nil
		}
	}
	switch kindOf(m.Data) {
	case kindPartAck:
		m.Release()
		if lc == nil {
			c.dropped.Add(1)
			return inbound{}, false, nil
		}
		if lc.parts != nil {
			if err := c.sendPart(seq, lc); err != nil {
				lc.done = true
				return inbound{}, true, fmt.Errorf("netrpc: call to %v: send a part of the request: %w", c.server, err)
			}
		}
		return inbound{}, false, nil
	case kindReplyPart:
		if lc == nil {
			lc = &largeCall{}
			c.large[seq] = lc
			c.nlarge.Add(1)
		}
		a, err := c.takeReplyPart(seq, lc, m)
		if a == nil && err == nil {
			return inbound{}, false, nil
		}
		lc.done = true
		if err != nil {
			return inbound{}, true, err
		}
		return assembled(a), true, nil
	default: // the call's response, or something parseResponse refuses
		if lc != nil {
			lc.done, lc.parts = true, nil
		}
		return wholeMessage(m), true, nil
	}
}

// takeReplyPart takes a part of lc's reply and asks for the next ones.
// It returns the reply's parts, the caller's from then on, once it is
// complete, or an error that fails the call; m is released or kept
// with the reply.
func (c *ClientCodec) takeReplyPart(seq uint64, lc *largeCall, m *sock.Message) (*assembler, error) {
	p, err := parsePart(m.Data, kindReplyPart)
	if err != nil {
		m.Release()
		return nil, err
	}
	if lc.reply == nil { // the first part
		lc.parts = nil // the server has the request
		switch {
		case p.offset != 0:
			err = fmt.Errorf("%w: reply starts with a part at byte %d", errMalformed, p.offset)
		case p.total > c.cfg.MaxMessage:
			err = tooLong("reply", p.total, c.cfg.MaxMessage, "client")
		case p.total <= homaMax || len(p.data) != partData:
			err = fmt.Errorf("%w: reply of %d bytes starts with a part of %d", errMalformed, p.total, len(p.data))
		}
		if err != nil {
			m.Release()
			return nil, err
		}
		lc.reply, lc.replyID, lc.pullAt = &assembler{total: p.total}, p.id, len(p.data)
	} else {
		i := slices.Index(lc.pulls, p.offset)
		switch {
		case p.id != lc.replyID || p.total != lc.reply.total:
			err = fmt.Errorf("%w: part of reply %d (%d bytes) in the call of reply %d (%d bytes)", errMalformed, p.id, p.total, lc.replyID, lc.reply.total)
		case i < 0:
			err = fmt.Errorf("%w: reply part at byte %d, not asked for", errMalformed, p.offset)
		case len(p.data) != min(partData, p.total-p.offset):
			err = fmt.Errorf("%w: reply part of %d bytes at byte %d, want %d", errMalformed, len(p.data), p.offset, min(partData, p.total-p.offset))
		}
		if err != nil {
			m.Release()
			return nil, err
		}
		lc.pulls = slices.Delete(lc.pulls, i, i+1)
	}
	if _, err := lc.reply.check(p.offset, len(p.data), cap(m.Data)); err != nil {
		m.Release()
		return nil, err
	}
	lc.reply.add(p.offset, p.data, m)
	if lc.reply.complete() {
		a := lc.reply
		lc.reply = &assembler{} // a is the caller's
		return a, nil
	}
	for len(lc.pulls) < partWindow && lc.pullAt < lc.reply.total {
		if err := c.sendPull(seq, lc); err != nil {
			return nil, fmt.Errorf("netrpc: call to %v: ask for a part of the reply: %w", c.server, err)
		}
	}
	return nil, nil
}
