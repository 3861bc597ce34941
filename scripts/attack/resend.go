package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/homa-go/homa/homa/wire"
)

// Scenario (c), RESEND amplification. A forged client asks the server
// for a 1 MB response, grants all of it and receives it, and never
// acknowledges it; then it sends RESENDs for the whole message
// (offset 0, length "to the end") and counts what comes back.

const (
	// responseSize is the response the server sends (--reply-size).
	responseSize = 1_000_000
	// resendCount RESENDs are sent resendGap apart: 20 within 100 ms.
	resendCount = 20
	resendGap   = 5 * time.Millisecond
	// resendListen is how long after the last RESEND the answers are
	// still counted.
	resendListen = time.Second
	// responseTimeout bounds the wait for the first copy.
	responseTimeout = 15 * time.Second
	// blockResend is the forged address block of this scenario.
	blockResend = 69
	// clientID is the forged client's RPC id: even, as a client's is.
	clientID = 1000
	// ampBound is the most the RESENDs may draw, in copies of the
	// message as first sent (headers included).
	ampBound = 1.1
)

// resend is scenario (c).
func resend(ctx context.Context, o *options) result {
	res := result{
		name:  fmt.Sprintf("c. %d RESEND(0, to end) in %v, 1 MB response", resendCount, resendCount*resendGap),
		bound: fmt.Sprintf("bytes out <= %.1f x one copy of the 1 MB response (headers included)", ampBound),
	}
	r, err := openRig(ctx, o, true, "--reply-size", fmt.Sprint(responseSize))
	if err != nil {
		return res.failed(err)
	}
	defer r.close()
	cl := &forgedClient{rig: r, addr: forged(blockResend, 0), buf: make([]byte, 64<<10)}
	oneCopy, pkts, err := cl.fetch(ctx)
	if err != nil {
		return res.failed(err)
	}
	out, err := cl.resends(ctx)
	if err != nil {
		return res.failed(err)
	}
	m, err := r.srv.scrape(ctx)
	if err := errors.Join(err, r.srv.alive()); err != nil {
		return res.failed(err)
	}
	in := resendCount * (ipv4HeaderLen + wire.ResendLen)
	rcvd := m.get("homa_packets_received_total", `type="resend"`)
	res.figures = map[string]float64{"out": float64(out.bytes), "copy": float64(oneCopy), "resends": rcvd}
	res.measured = fmt.Sprintf("one copy %d B in %d packets; %d RESENDs (%d B in, %.0f received) drew %d B in %d packets "+
		"(%s; %d B of payload) = %.2f copies, %.0f B out per B in; resends ignored %.0f",
		oneCopy, pkts, resendCount, in, rcvd, out.bytes, out.pkts, typeCounts(out.byType), out.payload,
		float64(out.bytes)/float64(oneCopy), float64(out.bytes)/float64(in), m.get("homa_resends_ignored_total"))
	res.pass = float64(out.bytes) <= ampBound*float64(oneCopy) && rcvd >= resendCount/2
	if rcvd < resendCount/2 {
		res.measured += "; too few RESENDs reached the server to judge"
	}
	return res
}

// forgedClient is a Homa client written by hand on the raw sockets: it
// speaks from a forged address and acknowledges nothing.
type forgedClient struct {
	rig  *attackRig
	addr netip.Addr
	buf  []byte
}

// send writes one packet from the client to the server.
func (c *forgedClient) send(pkt []byte) error {
	return c.rig.snd.send(c.addr, c.rig.srv.addr.Addr(), pkt)
}

// common is the header of the client's packets.
func (c *forgedClient) common() wire.Common {
	return wire.Common{SrcPort: forgedClientPort, DstPort: c.rig.srv.addr.Port(), SenderID: clientID}
}

// next returns the next packet of the server's side of the RPC, parsed,
// and its length on the wire; ok is false at the deadline.
func (c *forgedClient) next(p *wire.Packet, deadline time.Time) (n int, ok bool, err error) {
	for {
		pkt, src, err := c.rig.cap.read(c.buf, deadline)
		if isTimeout(err) {
			return 0, false, nil
		}
		if err != nil {
			return 0, false, err
		}
		var h wire.Common
		if src != c.rig.srv.addr.Addr() || wire.ParseCommon(pkt, &h) != nil ||
			h.DstPort != forgedClientPort || h.SenderID != clientID^1 {
			continue // not the server's, or not this RPC's
		}
		if err := p.Parse(pkt); err != nil {
			continue
		}
		return ipv4HeaderLen + len(pkt), true, nil
	}
}

// fetch sends a 100-byte request, grants the whole response at its
// first packet, and receives all of it. It returns the bytes (IP
// headers included) and packets of DATA it took: one copy.
func (c *forgedClient) fetch(ctx context.Context) (bytes, pkts int, err error) {
	req := wire.Data{Common: c.common(), MessageLength: 100, Incoming: 100, Payload: make([]byte, 100)}
	if err := c.send(req.Append(nil)); err != nil {
		return 0, 0, err
	}
	have := make([]bool, responseSize)
	covered, granted := 0, false
	deadline := time.Now().Add(responseTimeout)
	var p wire.Packet
	for covered < responseSize {
		if ctx.Err() != nil {
			return 0, 0, ctx.Err()
		}
		n, ok, err := c.next(&p, deadline)
		if err != nil {
			return 0, 0, err
		}
		if !ok {
			return 0, 0, fmt.Errorf("the 1 MB response did not arrive within %v: %d bytes of it", responseTimeout, covered)
		}
		if p.Type != wire.TypeData {
			continue
		}
		if p.Data.MessageLength != responseSize {
			return 0, 0, fmt.Errorf("response of %d bytes, want %d (is --reply-size honoured?)", p.Data.MessageLength, responseSize)
		}
		bytes += n
		pkts++
		off := int(p.Data.Offset())
		for i := range p.Data.Payload {
			if j := off + i; j < responseSize && !have[j] {
				have[j] = true
				covered++
			}
		}
		if !granted {
			g := wire.Grant{Common: c.common(), Offset: responseSize}
			if err := c.send(g.Append(nil)); err != nil {
				return 0, 0, err
			}
			granted = true
		}
	}
	return bytes, pkts, nil
}

// drawn is what the server sent after the RESENDs began.
type drawn struct {
	bytes, pkts   int // every packet, IP headers included
	data, payload int // DATA packets and their payload bytes
	byType        map[wire.Type]int
}

// resends sends the RESENDs, resendGap apart, and counts what the
// server sends the client from the first until resendListen after the
// last.
func (c *forgedClient) resends(ctx context.Context) (drawn, error) {
	d := drawn{byType: make(map[wire.Type]int)}
	pkt := (&wire.Resend{Common: c.common(), Offset: 0, Length: wire.ResendToEnd}).Append(nil)
	errc := make(chan error, 1)
	go func() {
		tick := time.NewTicker(resendGap)
		defer tick.Stop()
		for i := range resendCount {
			if i > 0 {
				select {
				case <-ctx.Done():
					errc <- ctx.Err()
					return
				case <-tick.C:
				}
			}
			if err := c.send(pkt); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	deadline := time.Now().Add(resendCount*resendGap + resendListen)
	var p wire.Packet
	for {
		n, ok, err := c.next(&p, deadline)
		if err != nil || !ok {
			return d, errors.Join(err, <-errc)
		}
		d.bytes += n
		d.pkts++
		d.byType[p.Type]++
		if p.Type == wire.TypeData {
			d.data++
			d.payload += len(p.Data.Payload)
		}
	}
}
