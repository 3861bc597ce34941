// Package rawfloor measures the lowest round-trip time any protocol on
// raw IP sockets can reach on a host: a ping-pong between two raw
// sockets on loopback with no protocol logic at all. Both sides
// busy-poll their socket with non-blocking reads, as the Homa engine's
// receive path does, and the server sends each request straight back.
//
// The packets use IP protocol 253, reserved for experiments (RFC 3692).
// Each carries a 16-byte header before the payload:
//
//	offset 0  tag   uint32  random per Pair, so that Pairs never see each other
//	offset 4  kind  uint32  1 request, 2 response
//	offset 8  seq   uint64  round-trip number, echoed
//
// A classic BPF filter on each socket passes only its own Pair's packets
// of the kind it reads. Raw sockets need CAP_NET_RAW; without it Open
// fails with an error matching ErrPermission.
package rawfloor

import (
	"context"
	"encoding/binary"
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
	HeaderLen = 16
	// MaxPayload is the largest payload a round trip carries: one
	// unfragmented packet on loopback (MTU 65536) in IPv4 and IPv6.
	MaxPayload = 65_000
)

// Packet kinds.
const (
	kindRequest  = 1
	kindResponse = 2
)

// Header field offsets.
const (
	tagOff  = 0
	kindOff = 4
	seqOff  = 8
)

// Errors.
var (
	// ErrPermission: raw sockets need CAP_NET_RAW (or root).
	ErrPermission = errors.New("rawfloor: raw IP sockets not permitted (need CAP_NET_RAW)")
	// ErrTooLong: the payload is longer than MaxPayload.
	ErrTooLong = errors.New("rawfloor: payload longer than MaxPayload")
	// ErrClosed: the Pair is closed.
	ErrClosed = errors.New("rawfloor: closed")
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
	out, in        []byte // the client's packet buffers

	stop    atomic.Bool
	wg      sync.WaitGroup
	closeMu sync.Mutex
	closed  bool
	served  atomic.Uint64
}

// Open starts a Pair on host, which must be a local address (normally a
// loopback one).
func Open(host netip.Addr) (*Pair, error) {
	p := &Pair{
		tag: rand.Uint32(),
		out: make([]byte, HeaderLen+MaxPayload),
		in:  make([]byte, ipv4HeaderMax+HeaderLen+MaxPayload),
	}
	var err error
	if p.server, err = openSocket(host, p.tag, kindRequest); err != nil {
		return nil, err
	}
	if p.client, err = openSocket(host, p.tag, kindResponse); err != nil {
		p.server.close()
		return nil, err
	}
	p.wg.Go(p.serve)
	return p, nil
}

// Served counts the requests the server has answered.
func (p *Pair) Served() uint64 { return p.served.Load() }

// serve answers requests until Close: each one goes back with its kind
// changed, from the buffer it was read into.
func (p *Pair) serve() {
	buf := make([]byte, ipv4HeaderMax+HeaderLen+MaxPayload)
	for idle := 0; !p.stop.Load(); {
		pkt, ok := p.server.poll(buf)
		if !ok {
			if idle++; idle%yieldEvery == 0 {
				runtime.Gosched()
			}
			continue
		}
		idle = 0
		binary.BigEndian.PutUint32(pkt[kindOff:], kindResponse)
		// Counted before the echo leaves, so that a client that has its
		// echo sees it counted.
		p.served.Add(1)
		if p.server.send(pkt) != nil {
			p.served.Add(^uint64(0))
		}
	}
}

// RoundTrip sends payload to the server and spins until the echo comes
// back. It returns the echoed payload, valid until the next call, or
// ctx's error if ctx ends first.
func (p *Pair) RoundTrip(ctx context.Context, payload []byte) ([]byte, error) {
	if len(payload) > MaxPayload {
		return nil, fmt.Errorf("%w: %d bytes", ErrTooLong, len(payload))
	}
	if p.stop.Load() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p.seq++
	pkt := p.out[:HeaderLen+len(payload)]
	binary.BigEndian.PutUint32(pkt[tagOff:], p.tag)
	binary.BigEndian.PutUint32(pkt[kindOff:], kindRequest)
	binary.BigEndian.PutUint64(pkt[seqOff:], p.seq)
	copy(pkt[HeaderLen:], payload)
	if err := p.client.send(pkt); err != nil {
		return nil, err
	}
	for idle := 1; ; idle++ {
		if resp, ok := p.client.poll(p.in); ok {
			if binary.BigEndian.Uint64(resp[seqOff:]) == p.seq {
				return resp[HeaderLen:], nil
			}
			continue // the echo of an earlier, abandoned round trip
		}
		if idle%yieldEvery == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if p.stop.Load() {
				return nil, ErrClosed
			}
			runtime.Gosched()
		}
	}
}

// Close stops the server and closes both sockets. A RoundTrip in
// progress must have returned first. Close is idempotent.
func (p *Pair) Close() error {
	p.closeMu.Lock()
	defer p.closeMu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	p.stop.Store(true)
	p.wg.Wait()
	return errors.Join(p.server.close(), p.client.close())
}
