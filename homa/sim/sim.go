// Package sim runs Homa protocol cores (package homa/core) on a virtual
// network with a virtual clock: a deterministic discrete-event
// simulation, seeded, with no goroutines, sockets or real time. Tests
// use it to drive the protocol through loss, duplication, reordering,
// delay and hostile packets in microseconds of real time per simulated
// second; a datacenter simulation can drive many more endpoints the same
// way.
//
// A Net holds endpoints (a core each, at an address and Homa port) and a
// queue of events: packet arrivals, core timers, and actions scheduled
// with After. Run processes the events in time order. Applications are
// callbacks: an endpoint's OnMessage receives its complete requests,
// responses and failed RPCs.
package sim

import (
	"container/heap"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/wire"
)

// Config describes the network.
type Config struct {
	// Seed makes the random choices (loss, duplication, jitter).
	Seed uint64
	// Delay is every packet's one-way delay; Jitter adds a uniform
	// random extra up to it, which reorders packets. Default Delay 2 µs.
	Delay, Jitter time.Duration
	// Loss and Duplicate are per-packet probabilities in [0, 1].
	Loss, Duplicate float64
	// MaxPacket is the largest Homa packet the network carries (the
	// path MTU less the IP header). Default 1480.
	MaxPacket int
	// Drop, when set, is asked about every packet before the random
	// faults; true drops it.
	Drop func(src, dst netip.AddrPort, pkt []byte) bool
	// ReportUnreachable makes a packet to an address and port with no
	// endpoint come back to its sender as a port-unreachable report, as
	// a kernel answers ICMP port unreachable.
	ReportUnreachable bool
	// ReadBatch, when positive, makes endpoints read as the engine's
	// shell does: packets wait in an endpoint's queue until a read
	// ReadDelay (default 1 µs) after the first, which takes up to
	// ReadBatch of them and hands them to the core in one HandleBatch,
	// each packet's payload landed where the core expects it
	// (core.Lend) as a socket read would. 0 hands every packet to the
	// core as it arrives.
	ReadBatch int
	ReadDelay time.Duration
}

// Stats counts what the network did.
type Stats struct {
	Sent, Delivered, Lost, Dropped, Duplicated, NoListener, Reported uint64
	// Bytes counts the Homa bytes sent by each source address.
	Bytes map[netip.Addr]uint64
}

// Net is a simulated network. It is not safe for concurrent use.
type Net struct {
	cfg       Config
	now       time.Duration
	rng       *rand.Rand
	events    events
	seq       uint64
	endpoints map[netip.AddrPort]*Endpoint
	stats     Stats
}

// New returns an empty network at time 0.
func New(cfg Config) *Net {
	if cfg.Delay <= 0 {
		cfg.Delay = 2 * time.Microsecond
	}
	if cfg.MaxPacket <= 0 {
		cfg.MaxPacket = 1480
	}
	if cfg.ReadDelay <= 0 {
		cfg.ReadDelay = time.Microsecond
	}
	return &Net{
		cfg:       cfg,
		rng:       rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		endpoints: make(map[netip.AddrPort]*Endpoint),
		stats:     Stats{Bytes: make(map[netip.Addr]uint64)},
	}
}

// Now is the simulated time.
func (n *Net) Now() time.Duration { return n.now }

// Stats returns the network's counters.
func (n *Net) Stats() Stats { return n.stats }

// Endpoint is one Homa endpoint on the network.
type Endpoint struct {
	net  *Net
	addr netip.AddrPort
	// Core is the endpoint's protocol state; read its Stats freely.
	Core *core.Core
	// OnMessage receives every complete message and failed client RPC.
	// Requests are Delivered to the core before it is called. When it is
	// nil, messages collect in Inbox.
	OnMessage func(*Endpoint, *contract.Message)
	// Inbox collects the messages when OnMessage is nil.
	Inbox []*contract.Message

	out      core.Output
	timerAt  time.Duration
	timerSet bool
	closed   bool

	// Batched reads (Config.ReadBatch): packets waiting for the read,
	// whether one is due, and where the core expects the next packets.
	rxq     []event
	reading bool
	lend    [][]byte
	lent    int
}

// Listen adds an endpoint at addr (a server port, or any port for a
// client) with the given protocol configuration.
func (n *Net) Listen(addr netip.AddrPort, cfg core.Config) *Endpoint {
	e := &Endpoint{net: n, addr: addr}
	e.Core = core.New(core.Local{
		Port:    addr.Port(),
		IPv6:    addr.Addr().Is6() && !addr.Addr().Is4In6(),
		FirstID: core.FirstID(int64(len(n.endpoints)+1) << 20),
	}, cfg)
	n.endpoints[addr] = e
	return e
}

// Addr is the endpoint's address and port.
func (e *Endpoint) Addr() netip.AddrPort { return e.addr }

// Send starts a client RPC (data is copied).
func (e *Endpoint) Send(dst netip.AddrPort, data []byte, cookie uint64) (uint64, error) {
	id, err := e.Core.Send(dst, append([]byte(nil), data...), cookie, e.net.cfg.MaxPacket, e.net.now, &e.out)
	e.settle()
	return id, err
}

// Reply answers the request m (data is copied).
func (e *Endpoint) Reply(m *contract.Message, data []byte) error {
	err := e.Core.Reply(m.Peer.Addr(), m.ID, append([]byte(nil), data...), e.net.cfg.MaxPacket, e.net.now, &e.out)
	e.settle()
	return err
}

// Abort ends the client RPC id.
func (e *Endpoint) Abort(id uint64) error {
	_, err := e.Core.Abort(id, e.net.now, &e.out)
	e.settle()
	return err
}

// Close takes the endpoint off the network: its core forgets every RPC
// and packets to it find no listener.
func (e *Endpoint) Close() {
	e.Core.Close(e.net.now, &e.out)
	e.settle()
	e.closed = true
	delete(e.net.endpoints, e.addr)
}

// settle routes what the last core call produced and keeps one timer
// event at the core's next deadline.
func (e *Endpoint) settle() {
	n := e.net
	for _, p := range e.out.Packets {
		pkt := p.Buf
		if len(p.Payload) > 0 {
			// On the wire a packet is one datagram: join header and
			// payload, so that the message's buffer may be reused.
			pkt = append(pkt[:len(pkt):len(pkt)], p.Payload...)
		}
		n.transmit(e.addr, p.Addr, pkt)
	}
	for _, h := range e.out.Holds {
		h.Release()
	}
	msgs := append([]*contract.Message(nil), e.out.Messages...)
	e.out.Reset()
	if at, ok := e.Core.Next(); ok && !e.closed && (!e.timerSet || at < e.timerAt) {
		e.timerAt, e.timerSet = max(at, n.now), true
		n.push(event{at: e.timerAt, kind: evTimer, ep: e})
	}
	for _, m := range msgs {
		if m.IsRequest() {
			e.Core.Delivered(m.Peer.Addr(), m.ID)
		}
		if e.OnMessage != nil {
			e.OnMessage(e, m)
		} else {
			e.Inbox = append(e.Inbox, m)
		}
	}
	// The work the core put off until its endpoint has nothing to read:
	// done at once here (a simulated endpoint reads instantly).
	if e.Core.IdleWork() {
		e.Core.Idle(n.now, &e.out)
		e.settle()
	}
}

// transmit puts a packet from src on the network towards host dst.
func (n *Net) transmit(src netip.AddrPort, dst netip.Addr, pkt []byte) {
	n.stats.Sent++
	n.stats.Bytes[src.Addr()] += uint64(len(pkt))
	if len(pkt) < 4 {
		n.stats.Dropped++
		return
	}
	to := netip.AddrPortFrom(dst, binary.BigEndian.Uint16(pkt[2:]))
	if n.cfg.Drop != nil && n.cfg.Drop(src, to, pkt) {
		n.stats.Dropped++
		return
	}
	if n.cfg.Loss > 0 && n.rng.Float64() < n.cfg.Loss {
		n.stats.Lost++
		return
	}
	copies := 1
	if n.cfg.Duplicate > 0 && n.rng.Float64() < n.cfg.Duplicate {
		n.stats.Duplicated++
		copies = 2
	}
	for range copies {
		n.push(event{at: n.now + n.delay(), kind: evPacket, src: src, dst: to, pkt: pkt})
	}
}

func (n *Net) delay() time.Duration {
	d := n.cfg.Delay
	if n.cfg.Jitter > 0 {
		d += time.Duration(n.rng.Int64N(int64(n.cfg.Jitter) + 1))
	}
	return d
}

// Inject delivers pkt to the endpoint its header names on host dst, as
// if host src had sent it (a forged packet, say), after the network's
// delay. It goes through no faults.
func (n *Net) Inject(src netip.Addr, dst netip.Addr, pkt []byte) {
	if len(pkt) < 4 {
		return
	}
	n.stats.Sent++
	n.stats.Bytes[src] += uint64(len(pkt))
	to := netip.AddrPortFrom(dst, binary.BigEndian.Uint16(pkt[2:]))
	from := netip.AddrPortFrom(src, binary.BigEndian.Uint16(pkt[0:]))
	n.push(event{at: n.now + n.cfg.Delay, kind: evPacket, src: from, dst: to, pkt: append([]byte(nil), pkt...)})
}

// Unreachable hands the endpoint an ICMP error about a packet it sent to
// host dst, now: why is what the error reports and quoted is the packet
// as the error quoted it, from its Homa header on (as the engine's socket
// reads it from its error queue).
func (e *Endpoint) Unreachable(why core.Unreachability, quoted []byte, dst netip.Addr) {
	e.Core.Unreachable(why, quoted, dst, e.net.now, &e.out)
	e.settle()
}

// After runs f at time now+d.
func (n *Net) After(d time.Duration, f func()) {
	n.push(event{at: n.now + max(d, 0), kind: evFunc, fn: f})
}

// Run processes every event up to time until, and leaves the clock there.
func (n *Net) Run(until time.Duration) {
	for len(n.events) > 0 && n.events[0].at <= until {
		n.step()
	}
	n.now = max(n.now, until)
}

// RunUntil processes events until done reports true (checked after each
// event) or the clock passes limit; it reports whether done came true.
func (n *Net) RunUntil(done func() bool, limit time.Duration) bool {
	for !done() {
		if len(n.events) == 0 || n.events[0].at > limit {
			n.now = max(n.now, limit)
			return done()
		}
		n.step()
	}
	return true
}

// Idle reports whether no event is pending: every core has no deadline
// and nothing is in flight.
func (n *Net) Idle() bool { return len(n.events) == 0 }

func (n *Net) step() {
	ev := heap.Pop(&n.events).(event)
	n.now = max(n.now, ev.at)
	switch ev.kind {
	case evPacket:
		n.arrive(ev)
	case evTimer:
		e := ev.ep
		if e.closed || !e.timerSet || e.timerAt != ev.at {
			return // superseded
		}
		e.timerSet = false
		e.Core.Tick(n.now, &e.out)
		e.settle()
	case evFunc:
		ev.fn()
	case evRead:
		n.read(ev.ep)
	}
}

func (n *Net) arrive(ev event) {
	e := n.endpoints[ev.dst]
	if e == nil {
		n.stats.NoListener++
		if src := n.endpoints[ev.src]; n.cfg.ReportUnreachable && src != nil {
			n.stats.Reported++
			src.Core.Unreachable(core.PortUnreachable, ev.pkt, ev.dst.Addr(), n.now, &src.out)
			src.settle()
		}
		return
	}
	n.stats.Delivered++
	if n.cfg.ReadBatch > 0 {
		e.rxq = append(e.rxq, ev)
		if !e.reading {
			e.reading = true
			n.push(event{at: n.now + n.cfg.ReadDelay, kind: evRead, ep: e})
		}
		return
	}
	e.Core.Handle(ev.pkt, ev.src.Addr(), n.now, &e.out)
	e.settle()
}

// read hands the core up to ReadBatch queued packets, as one read of a
// socket would: the payload of the packet in slot i goes to the i-th
// region the core lent (see core.Lend), the rest of it behind its header.
func (n *Net) read(e *Endpoint) {
	e.reading = false
	if e.closed {
		e.rxq = nil
		return
	}
	k := min(len(e.rxq), n.cfg.ReadBatch)
	in := make([]core.Inbound, k)
	for i, ev := range e.rxq[:k] {
		in[i] = core.Inbound{Buf: ev.pkt, Addr: ev.src.Addr()}
		if i < e.lent {
			in[i].Buf, in[i].Land = land(ev.pkt, e.lend[i])
		}
	}
	e.rxq = append(e.rxq[:0], e.rxq[k:]...)
	e.Core.HandleBatch(in, n.now, &e.out)
	e.settle()
	if len(e.lend) < n.cfg.ReadBatch {
		e.lend = make([][]byte, n.cfg.ReadBatch)
	}
	e.lent = e.Core.Lend(e.lend)
	if len(e.rxq) > 0 {
		e.reading = true
		n.push(event{at: n.now + n.cfg.ReadDelay, kind: evRead, ep: e})
	}
}

// land splits pkt as a landing read does: its first DataLen bytes, then
// as much as region holds into region, the rest behind the header. It
// returns the header buffer (with room for the whole packet) and the
// part of region used.
func land(pkt, region []byte) (buf, landed []byte) {
	if len(pkt) <= wire.DataLen {
		return pkt, nil
	}
	k := copy(region, pkt[wire.DataLen:])
	buf = make([]byte, len(pkt)-k, len(pkt))
	copy(buf, pkt[:wire.DataLen])
	copy(buf[wire.DataLen:], pkt[wire.DataLen+k:])
	return buf, region[:k]
}

type evKind uint8

const (
	evPacket evKind = iota
	evTimer
	evFunc
	evRead
)

type event struct {
	at       time.Duration
	seq      uint64
	kind     evKind
	src, dst netip.AddrPort
	pkt      []byte
	ep       *Endpoint
	fn       func()
}

type events []event

func (h events) Len() int { return len(h) }
func (h events) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h events) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *events) Push(x any)   { *h = append(*h, x.(event)) }
func (h *events) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

func (n *Net) push(ev event) {
	n.seq++
	ev.seq = n.seq
	heap.Push(&n.events, ev)
}
