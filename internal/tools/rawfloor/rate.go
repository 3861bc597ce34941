package rawfloor

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync/atomic"
)

// The rate floor. A Pair measures the round trip of one message at a
// time; a Rate measures how many small RPCs per second raw sockets can
// carry with many in flight, with no protocol logic: an echo server on
// one raw socket, and clients on raw sockets of their own, on one
// loopback address. Every message is one packet each way, and both
// sides move packets in batches of up to RateBatch per system call
// (recvmmsg, sendmmsg): the server answers each batch it reads with one
// sendmmsg, and a client sends the requests it queued since its last
// poll in one. So the kernel's work per packet is all that is left: the
// path through loopback and, for each packet, a clone and a filter run
// for every raw socket of protocol Protocol on the host, as the kernel
// delivers raw packets to each socket of their protocol.
//
// Rate packets carry the header of the package doc with kind 3 (request)
// or 4 (response), seq the client's slot, echoed, off the client's
// number and total the payload's length. The server's filter passes the
// Rate's requests, each client's its own responses.
//
// As with a Pair, nothing recovers losses: an RPC whose packet is lost
// never completes. The sockets' buffers (4 MiB) hold far more than a
// few hundred small RPCs in flight.

const (
	// RateBatch is the most packets one system call of a Rate moves.
	RateBatch = 64
	// MaxRatePayload is the longest message a Rate carries each way.
	MaxRatePayload = 8192
)

// Kinds of the Rate's packets.
const (
	kindRateRequest  = 3
	kindRateResponse = 4
)

// rateRecvLen is the room each packet of a batch is read into: the
// largest IPv4 header, the floor header and the longest payload, and
// one byte more, so that a longer packet shows as truncated.
const rateRecvLen = ipv4HeaderMax + HeaderLen + MaxRatePayload + 1

// Rate is an echo server and clients for the rate floor (see above).
// The server runs in its own goroutine, spinning on its socket, from
// OpenRate until Close.
type Rate struct {
	tag     uint32
	v4      bool
	server  *socket
	clients []*RateClient

	serving
	served, dropped atomic.Uint64
}

// RateClient is one client of a Rate, on a raw socket of its own. It is
// for one goroutine at a time.
type RateClient struct {
	r     *Rate
	s     *socket
	index uint32
	in    *rateBatch // responses read
	out   *rateBatch // requests queued, sent at the next Poll
}

// rateBatch holds the packets of one system call: what was read, or
// what is to be sent.
type rateBatch struct {
	io  *batchIO          // the system call's argument block
	buf []byte            // room for RateBatch packets read, or headers to send
	pkt [RateBatch][]byte // each packet read (the whole room); each header to send
	pay [RateBatch][]byte // each payload to send
	len [RateBatch]int    // each packet read's length (-1: truncated)
	n   int               // packets queued to send
}

// newRateBatch makes a batch with room bytes for each packet: rateRecvLen
// to read, HeaderLen to send.
func newRateBatch(room int) *rateBatch {
	b := &rateBatch{io: newBatchIO(), buf: make([]byte, RateBatch*room)}
	for i := range b.pkt {
		b.pkt[i] = b.buf[i*room : (i+1)*room]
	}
	return b
}

// OpenRate starts a Rate with clients clients (1..RateBatch) on host,
// which must be a local address (normally a loopback one).
func OpenRate(host netip.Addr, clients int) (*Rate, error) {
	if clients < 1 || clients > RateBatch {
		return nil, fmt.Errorf("rawfloor: %d clients: want 1..%d", clients, RateBatch)
	}
	host = host.Unmap()
	r := &Rate{tag: rand.Uint32(), v4: host.Is4()}
	var err error
	if r.server, err = openSocket(host, match{tag: r.tag, kind: kindRateRequest}); err != nil {
		return nil, err
	}
	for i := range clients {
		s, err := openSocket(host, match{tag: r.tag, kind: kindRateResponse, client: uint32(i), byClient: true})
		if err != nil {
			r.closeSockets()
			return nil, err
		}
		r.clients = append(r.clients, &RateClient{r: r, s: s, index: uint32(i), in: newRateBatch(rateRecvLen), out: newRateBatch(HeaderLen)})
	}
	r.wg.Go(r.serve)
	return r, nil
}

// Client returns client i (0 <= i < the clients of OpenRate).
func (r *Rate) Client(i int) *RateClient { return r.clients[i] }

// Served counts the requests the server has answered.
func (r *Rate) Served() uint64 { return r.served.Load() }

// Dropped counts the malformed packets either side dropped, and the
// responses the server could not send.
func (r *Rate) Dropped() uint64 { return r.dropped.Load() }

// serve answers the requests of each batch it reads with one batch.
func (r *Rate) serve() {
	in, out := newRateBatch(rateRecvLen), newRateBatch(HeaderLen)
	for idle := 0; !r.stop.Load(); {
		n := r.server.recvBatch(in.io, in.pkt[:], in.len[:])
		if n == 0 {
			if idle++; idle%yieldEvery == 0 {
				runtime.Gosched()
			}
			continue
		}
		idle = 0
		out.n = 0
		for i := range n {
			h, payload, ok := r.parse(in, i, kindRateRequest)
			if !ok {
				continue
			}
			h.kind = kindRateResponse
			out.queue(h, payload)
		}
		r.served.Add(uint64(out.n))
		for sent := 0; sent < out.n && !r.stop.Load(); {
			k, err := r.server.sendBatch(out.io, out.pkt[sent:out.n], out.pay[sent:out.n])
			sent += k
			switch {
			case errors.Is(err, errBusy):
				runtime.Gosched() // no room now
			case err != nil:
				// Nothing the floor can do: those responses are lost, and
				// their clients wait until their contexts end.
				r.dropped.Add(uint64(out.n - sent))
				sent = out.n
			}
		}
	}
}

// parse checks packet i of b, read as kind, and returns its header and
// payload.
func (r *Rate) parse(b *rateBatch, i int, kind uint32) (header, []byte, bool) {
	n := b.len[i]
	if n < 0 {
		r.dropped.Add(1)
		return header{}, nil, false
	}
	p := b.pkt[i][:n]
	if r.v4 {
		if len(p) < ipv4HeaderMin || int(p[0]&0xf)*4 < ipv4HeaderMin || int(p[0]&0xf)*4 > len(p) {
			r.dropped.Add(1)
			return header{}, nil, false
		}
		p = p[int(p[0]&0xf)*4:]
	}
	h, hl, err := parseHeader(p)
	if err != nil || h.tag != r.tag || h.kind != kind || h.total > MaxRatePayload || int(h.total) != len(p)-hl {
		r.dropped.Add(1)
		return header{}, nil, false
	}
	return h, p[hl:], true
}

// queue adds a packet of header h and payload to b, to be sent.
func (b *rateBatch) queue(h header, payload []byte) {
	at := b.n * HeaderLen
	b.pkt[b.n] = h.appendTo(b.buf[at:at])
	b.pay[b.n] = payload
	b.n++
}

// Send queues a request of payload for slot, which the response echoes;
// it leaves with the others queued at the next Poll, or at once when
// RateBatch are queued. payload must not change until it has left.
func (c *RateClient) Send(slot uint64, payload []byte) error {
	if len(payload) > MaxRatePayload {
		return fmt.Errorf("%w: %d bytes", ErrTooLong, len(payload))
	}
	if c.r.stop.Load() {
		return ErrClosed
	}
	if c.out.n == RateBatch {
		if err := c.flush(); err != nil {
			return err
		}
	}
	c.out.queue(header{tag: c.r.tag, kind: kindRateRequest, seq: slot, off: c.index, total: uint32(len(payload))}, payload)
	return nil
}

// Poll sends the requests queued, then reads the responses that have
// come, without waiting, and calls fn with the slot and payload of each
// (the payload is valid during the call, and fn may call Send). It
// returns how many responses it read.
func (c *RateClient) Poll(fn func(slot uint64, payload []byte)) (int, error) {
	if err := c.flush(); err != nil {
		return 0, err
	}
	n := c.s.recvBatch(c.in.io, c.in.pkt[:], c.in.len[:])
	got := 0
	for i := range n {
		h, payload, ok := c.r.parse(c.in, i, kindRateResponse)
		if !ok || h.off != c.index {
			continue
		}
		got++
		fn(h.seq, payload)
	}
	return got, nil
}

// flush sends the queued requests, waiting (yielding) while the socket
// has no room, until the Rate closes.
func (c *RateClient) flush() error {
	b := c.out
	for sent := 0; sent < b.n; {
		if c.r.stop.Load() {
			return ErrClosed
		}
		k, err := c.s.sendBatch(b.io, b.pkt[sent:b.n], b.pay[sent:b.n])
		switch {
		case errors.Is(err, errBusy):
			runtime.Gosched()
		case err != nil:
			return fmt.Errorf("rawfloor: send: %w", err)
		}
		sent += k
	}
	b.n = 0
	return nil
}

// Close stops the server and closes every socket. No client may be in
// use. Close is idempotent.
func (r *Rate) Close() error { return r.shut(r.closeSockets) }

func (r *Rate) closeSockets() error {
	err := r.server.close()
	for _, c := range r.clients {
		err = errors.Join(err, c.s.close())
	}
	return err
}
