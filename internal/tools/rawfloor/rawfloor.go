// Package rawfloor measures the lowest round-trip time any protocol on
// raw IP sockets can reach on a host: a ping-pong between two raw
// sockets on loopback with no protocol logic at all. Both sides
// busy-poll their socket with non-blocking reads, as the Homa engine's
// receive path does. A Rate (rate.go) measures the other floor: the
// most small RPCs per second raw sockets carry with many in flight.
//
// A round trip carries a message of up to MaxMessage bytes each way, in
// packets of up to MaxPayload bytes: packet i carries the bytes from
// offset i×MaxPayload on. The client sends every packet of the request,
// one sendmsg(2) each, then spins reading the response. The server
// collects a request's packets until the whole message has arrived, as
// an echo server that needs the whole request before it answers does,
// and then sends it back, every packet with its kind changed.
//
// The packets use IP protocol 253, reserved for experiments (RFC 3692).
// Each carries a 24-byte header before the payload:
//
//	offset 0   tag    uint32  random per Pair, so that Pairs never see each other
//	offset 4   kind   uint32  1 request, 2 response
//	offset 8   seq    uint64  round-trip number, echoed
//	offset 16  off    uint32  offset of the packet's payload in the message
//	offset 20  total  uint32  length of the whole message
//
// A classic BPF filter on each socket passes only its own Pair's packets
// of the kind it reads, at least HeaderLen bytes long. Raw sockets need
// CAP_NET_RAW; without it Open fails with an error matching
// ErrPermission.
//
// Neither end copies payload bytes in user space. Each end has one
// message buffer, allocated at Open; a packet is read with recvmsg(2)
// into two buffers, the IP header (IPv4 only: IPv6 raw sockets return
// none) and the floor header into a small one, the payload straight into
// the message buffer at the place of the next packet in order. A packet
// that belongs elsewhere (which loopback, keeping the order, never
// delivers) is moved to its place and counted in Stats.Moved. Packets
// are sent with sendmsg(2) from the header and a slice of the message;
// an IPv4 socket writes its own IP header too (IP_HDRINCL), as the
// engine's raw Conns do, so that the kernel copies the packet plainly
// instead of checksumming it as it copies.
//
// What arrives is checked, not trusted: a packet whose offset, length
// and total do not fit the layout above, whose total exceeds MaxMessage
// or differs from that of its round trip's other packets, is dropped; a
// packet of an earlier round trip, or a duplicate, is ignored. Both are
// counted in Stats.
//
// The floor has no loss recovery. Both sockets get send and receive
// buffers of 4 MiB (SO_RCVBUFFORCE where permitted, else as much as
// SO_RCVBUF allows), enough for a whole MaxMessage burst; if packets of
// a round trip are lost all the same, RoundTrip waits until its context
// ends.
package rawfloor

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
)

const (
	// Protocol is the IP protocol number of the packets: 253, "use for
	// experimentation and testing" (RFC 3692).
	Protocol = 253
	// HeaderLen is the length of the header in front of each payload.
	HeaderLen = 24
	// MaxPayload is the largest payload of one packet: one unfragmented
	// packet on loopback (MTU 65536) in IPv4 and IPv6.
	MaxPayload = 65_000
	// MaxMessage is the longest message a round trip carries each way.
	MaxMessage = 1_000_000
)

// sockBufBytes is the send and receive buffer size asked for on each
// socket: room for a whole MaxMessage burst with the kernel's overhead
// per packet.
const sockBufBytes = 4 << 20

// Errors.
var (
	// ErrPermission: raw sockets need CAP_NET_RAW (or root).
	ErrPermission = errors.New("rawfloor: raw IP sockets not permitted (need CAP_NET_RAW)")
	// ErrTooLong: the payload is longer than MaxMessage.
	ErrTooLong = errors.New("rawfloor: payload longer than MaxMessage")
	// ErrClosed: the Pair is closed.
	ErrClosed = errors.New("rawfloor: closed")
)

// errBusy is a socket's answer when it has nothing to read, or no room
// to send right now; errTruncated, when the packet it read was longer
// than the buffers given.
var (
	errBusy      = errors.New("rawfloor: socket busy")
	errTruncated = errors.New("rawfloor: packet truncated")
)

// yieldEvery is how many empty polls a spinning goroutine makes between
// offers of its processor to other goroutines (which matters only when
// they outnumber the processors).
const yieldEvery = 16

// Pair is an echo server and a client on two raw sockets of one
// loopback address. The server runs in its own goroutine, spinning on
// its socket, from Open until Close. The client side (RoundTrip) is for
// one goroutine at a time.
type Pair struct {
	client, server *socket
	tag            uint32
	seq            uint64
	responses      *receiver // the client's
	requests       *receiver // the server's

	serving
	served atomic.Uint64
}

// serving is the goroutine that answers the requests of a Pair or a
// Rate, and the Close that stops it once.
type serving struct {
	stop    atomic.Bool // Close has begun: the server goroutine returns
	wg      sync.WaitGroup
	closeMu sync.Mutex
	closed  bool
}

// shut stops the server goroutine and then calls release (which closes
// the sockets), the first time only.
func (s *serving) shut(release func() error) error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.stop.Store(true)
	s.wg.Wait()
	return release()
}

// Stats counts what the two ends of a Pair did with the packets they
// read.
type Stats struct {
	// Served counts the requests the server has answered.
	Served uint64
	// Moved counts packets whose payload was read at the place of
	// another packet (or behind IPv4 options) and then moved to its own.
	Moved uint64
	// Dropped counts malformed and truncated packets.
	Dropped uint64
	// Stale counts ignored packets: of an earlier round trip, or
	// duplicates.
	Stale uint64
}

// Open starts a Pair on host, which must be a local address (normally a
// loopback one).
func Open(host netip.Addr) (*Pair, error) {
	host = host.Unmap()
	tag := rand.Uint32()
	p := &Pair{
		tag:       tag,
		responses: newReceiver(tag, kindResponse, host.Is4(), false),
		requests:  newReceiver(tag, kindRequest, host.Is4(), true),
	}
	var err error
	if p.server, err = openSocket(host, match{tag: p.tag, kind: kindRequest}); err != nil {
		return nil, err
	}
	if p.client, err = openSocket(host, match{tag: p.tag, kind: kindResponse}); err != nil {
		p.server.close()
		return nil, err
	}
	p.wg.Go(p.serve)
	return p, nil
}

// Served counts the requests the server has answered.
func (p *Pair) Served() uint64 { return p.served.Load() }

// Stats returns the Pair's counters, of client and server together.
func (p *Pair) Stats() Stats {
	s := Stats{Served: p.served.Load()}
	for _, r := range []*receiver{p.responses, p.requests} {
		s.Moved += r.moved.Load()
		s.Dropped += r.dropped.Load()
		s.Stale += r.stale.Load()
	}
	return s
}

// serve answers requests until Close: once all of a request has
// arrived, it goes back from the buffer it was read into.
func (p *Pair) serve() {
	r := p.requests
	for idle := 0; !p.stop.Load(); {
		l, ok := poll(p.server, r)
		if !ok {
			if idle++; idle%yieldEvery == 0 {
				runtime.Gosched()
			}
			continue
		}
		idle = 0
		if l != landedLast {
			continue
		}
		// Counted before the echo leaves, so that a client that has its
		// echo sees it counted.
		p.served.Add(1)
		h := header{tag: p.tag, kind: kindResponse, seq: r.seq}
		if p.send(context.Background(), p.server, h, r.message()) != nil {
			p.served.Add(^uint64(0))
		}
	}
}

// RoundTrip sends payload to the server and spins until the echo comes
// back. It returns the echoed payload, a slice of the client's message
// buffer valid until the next call, or ctx's error if ctx ends first
// (as it must for a round trip that lost a packet).
func (p *Pair) RoundTrip(ctx context.Context, payload []byte) ([]byte, error) {
	if len(payload) > MaxMessage {
		return nil, fmt.Errorf("%w: %d bytes", ErrTooLong, len(payload))
	}
	if p.stop.Load() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p.seq++
	h := header{tag: p.tag, kind: kindRequest, seq: p.seq}
	if err := p.send(ctx, p.client, h, payload); err != nil {
		return nil, err
	}
	r := p.responses
	r.expect(p.seq, len(payload))
	for idle := 1; ; idle++ {
		if l, ok := poll(p.client, r); ok {
			if l == landedLast {
				return r.message(), nil
			}
			continue
		}
		if idle%yieldEvery == 0 {
			if err := p.wait(ctx); err != nil {
				return nil, err
			}
		}
	}
}

// send sends msg in packets with header h (its off and total set here),
// each from h and a slice of msg. When the socket has no room it waits,
// until ctx ends or the Pair closes.
func (p *Pair) send(ctx context.Context, s *socket, h header, msg []byte) error {
	h.total = uint32(len(msg))
	var hb [HeaderLen]byte
	for off := 0; ; off += MaxPayload {
		end := min(off+MaxPayload, len(msg))
		h.off = uint32(off)
		h.appendTo(hb[:0])
		for {
			err := s.send(hb[:], msg[off:end])
			if err != errBusy {
				if err != nil {
					return fmt.Errorf("rawfloor: send: %w", err)
				}
				break
			}
			if err := p.wait(ctx); err != nil {
				return err
			}
		}
		if end == len(msg) {
			return nil
		}
	}
}

// wait offers the processor to other goroutines, unless ctx has ended
// or the Pair is closing.
func (p *Pair) wait(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.stop.Load() {
		return ErrClosed
	}
	runtime.Gosched()
	return nil
}

// poll reads one packet from s into r without waiting. It reports what
// r did with the packet, or false if none was queued.
func poll(s *socket, r *receiver) (landing, bool) {
	at := r.at()
	head, body, spill := r.parts(at)
	n, err := s.recv(head, body, spill)
	switch err {
	case nil:
		return r.land(at, n), true
	case errTruncated:
		return r.drop(), true
	}
	return 0, false
}

// Close stops the server and closes both sockets. A RoundTrip in
// progress must have returned first. Close is idempotent.
func (p *Pair) Close() error {
	return p.shut(func() error { return errors.Join(p.server.close(), p.client.close()) })
}
