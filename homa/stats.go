package homa

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/homa-go/homa/grant"
	"github.com/homa-go/homa/homa/netio"
	"github.com/homa-go/homa/homa/wire"
	"github.com/homa-go/homa/pacer"
)

// DropReason says why a received packet was discarded.
type DropReason uint8

// Reasons for dropping a received packet.
const (
	DropShort       DropReason = iota // shorter than its type's header
	DropUnknownType                   // type byte not a Homa type
	DropBadField                      // a field out of range or inconsistent
	DropUnknownRPC                    // no RPC (or peer) matches it
	DropLimit                         // a state limit refused new work
	DropOtherPort                     // addressed to, or acknowledging, another port
	DropIgnored                       // a type that is read and ignored (FREEZE)
	DropStale                         // a late duplicate of a finished RPC
	numDropReasons
)

// unexported aliases keep handler code short.
const (
	dropShort       = DropShort
	dropUnknownType = DropUnknownType
	dropBadField    = DropBadField
	dropUnknownRPC  = DropUnknownRPC
	dropLimit       = DropLimit
	dropOtherPort   = DropOtherPort
	dropIgnored     = DropIgnored
	dropStale       = DropStale
)

var dropNames = [numDropReasons]string{"short", "unknown_type", "bad_field", "unknown_rpc", "limit", "other_port", "ignored", "stale"}

func (r DropReason) String() string {
	if r < numDropReasons {
		return dropNames[r]
	}
	return "invalid"
}

func dropReasonOf(err error) DropReason {
	if errors.Is(err, wire.ErrShort) {
		return dropShort
	}
	return dropUnknownType
}

// numTypes covers every packet type byte from DATA (0x10) to ACK (0x18).
const numTypes = int(wire.TypeAck-wire.TypeData) + 1

func typeIndex(t wire.Type) int { return int(t - wire.TypeData) }

// counters are the endpoint's statistics: atomics, cheap to bump, read by
// Stats. Per packet, only the counters by type and priority move; the
// rest move per RPC or on rare events.
type counters struct {
	rxPackets         [numTypes]atomic.Uint64
	rxBytes           [numTypes]atomic.Uint64
	txPackets         [numTypes]atomic.Uint64
	txBytes           [numTypes]atomic.Uint64
	txPriority        [wire.NumPriorities]atomic.Uint64
	drops             [numDropReasons]atomic.Uint64
	dupPackets        atomic.Uint64
	grantsSent        atomic.Uint64
	retransmits       atomic.Uint64
	resentPackets     atomic.Uint64
	rpcsStarted       atomic.Uint64
	rpcsCompleted     atomic.Uint64
	rpcsAborted       atomic.Uint64
	rpcTimeouts       atomic.Uint64
	serverRPCsStarted atomic.Uint64
	requestsReceived  atomic.Uint64
	serverRPCsFreed   atomic.Uint64
	readErrors        atomic.Uint64
	writeErrors       atomic.Uint64
	resendsSent       atomic.Uint64
	needAcks          atomic.Uint64
	peerTimeouts      atomic.Uint64
	reclaimed         atomic.Uint64
	cutoffsSent       atomic.Uint64

	hist histograms
	// epoch is when the endpoint started; RPC start times are durations
	// since it, on the monotonic clock.
	epoch time.Time
}

func (c *counters) init() {
	c.hist.init()
	c.epoch = time.Now()
}

// since is the time since the endpoint started.
func (c *counters) since() time.Duration { return time.Since(c.epoch) }

func (c *counters) drop(r DropReason) { c.drops[r].Add(1) }

// countRx counts a received packet of type t and n bytes.
func (c *counters) countRx(t wire.Type, n int) {
	i := typeIndex(t)
	c.rxPackets[i].Add(1)
	c.rxBytes[i].Add(uint64(n))
}

// countTx counts a packet the Conn accepted.
func (c *counters) countTx(p *netio.Packet) {
	pkt := p.Bytes()
	if t, err := wire.PeekType(pkt); err == nil {
		i := typeIndex(t)
		c.txPackets[i].Add(1)
		c.txBytes[i].Add(uint64(len(pkt)))
		c.txPriority[p.Priority%wire.NumPriorities].Add(1)
	}
}

// Stats is a snapshot of an endpoint's counters and state. Byte counts of
// packets are Homa packets, header included, without the IP (or UDP)
// header below.
type Stats struct {
	RxPackets map[wire.Type]uint64 // received packets by type (valid type byte)
	RxBytes   map[wire.Type]uint64 // their bytes
	TxPackets map[wire.Type]uint64 // sent packets by type
	TxBytes   map[wire.Type]uint64 // their bytes
	// TxPriority counts sent packets by priority, 0 (lowest) to 7.
	TxPriority [wire.NumPriorities]uint64
	Drops      map[DropReason]uint64
	// DuplicatePackets counts DATA that brought no new bytes.
	DuplicatePackets uint64
	GrantsSent       uint64
	// Retransmits counts retransmissions (one per range asked for or
	// restarted), ResentPackets the DATA packets they sent.
	Retransmits   uint64
	ResentPackets uint64
	RPCsStarted   uint64 // client RPCs
	RPCsCompleted uint64 // client RPCs whose response arrived
	RPCsAborted   uint64 // client RPCs ended by Abort
	RPCTimeouts   uint64 // client RPCs failed with ErrPeerTimeout
	// ServerRPCsStarted counts server RPCs created by a request's first
	// packet; RequestsReceived those whose request went to the
	// application, and ServerRPCsCompleted those it answered with Reply.
	ServerRPCsStarted   uint64
	RequestsReceived    uint64
	ServerRPCsCompleted uint64
	ServerRPCsFreed     uint64 // server RPCs acknowledged and forgotten
	ReadErrors          uint64
	WriteErrors         uint64
	ResendsSent         uint64 // RESEND packets this endpoint issued
	NeedAcksSent        uint64
	PeerTimeouts        uint64 // peers declared dead
	Reclaimed           uint64 // server RPCs forgotten after client silence
	CutoffsSent         uint64 // CUTOFFS packets sent to peers with stale versions
	// Message bytes: requests sent by clients and received by servers,
	// responses sent by servers and received by clients (the sums of
	// MessageSizes).
	RequestBytesSent, RequestBytesReceived   uint64
	ResponseBytesSent, ResponseBytesReceived uint64
	// Current state.
	ClientRPCs, ServerRPCs, Peers int

	// Latency is the time from Send to the complete response of client
	// RPCs (in nanoseconds), by the size class of the larger of request
	// and response. Failed RPCs are not counted.
	Latency [NumSizeClasses]Histogram
	// MessageSizes are the lengths of complete messages (in bytes) by
	// direction and kind: a client sends requests and receives responses,
	// a server receives requests and sends responses.
	MessageSizes [NumDirections][NumKinds]Histogram

	// Grants is the receiver's SRPT scheduler: GRANT decisions, granted
	// bytes, FIFO grants, messages needing grants and total incoming.
	Grants grant.Stats
	// Pacer is the transmit queue (zero when LinkMbps is 0): queued
	// messages and bytes, packets sent, FIFO picks, throttled waits.
	Pacer pacer.Stats
}

// TotalDrops is the sum of Drops.
func (s *Stats) TotalDrops() uint64 {
	var n uint64
	for _, v := range s.Drops {
		n += v
	}
	return n
}

// Stats returns a snapshot of the endpoint's counters.
func (e *Endpoint) Stats() Stats {
	c := &e.stats
	s := Stats{
		RxPackets:         make(map[wire.Type]uint64),
		RxBytes:           make(map[wire.Type]uint64),
		TxPackets:         make(map[wire.Type]uint64),
		TxBytes:           make(map[wire.Type]uint64),
		Drops:             make(map[DropReason]uint64),
		DuplicatePackets:  c.dupPackets.Load(),
		GrantsSent:        c.grantsSent.Load(),
		Retransmits:       c.retransmits.Load(),
		ResentPackets:     c.resentPackets.Load(),
		RPCsStarted:       c.rpcsStarted.Load(),
		RPCsCompleted:     c.rpcsCompleted.Load(),
		RPCsAborted:       c.rpcsAborted.Load(),
		RPCTimeouts:       c.rpcTimeouts.Load(),
		ServerRPCsStarted: c.serverRPCsStarted.Load(),
		RequestsReceived:  c.requestsReceived.Load(),
		ServerRPCsFreed:   c.serverRPCsFreed.Load(),
		ReadErrors:        c.readErrors.Load(),
		WriteErrors:       c.writeErrors.Load(),
		ResendsSent:       c.resendsSent.Load(),
		NeedAcksSent:      c.needAcks.Load(),
		PeerTimeouts:      c.peerTimeouts.Load(),
		Reclaimed:         c.reclaimed.Load(),
		CutoffsSent:       c.cutoffsSent.Load(),
	}
	loadByType(c.rxPackets[:], s.RxPackets)
	loadByType(c.rxBytes[:], s.RxBytes)
	loadByType(c.txPackets[:], s.TxPackets)
	loadByType(c.txBytes[:], s.TxBytes)
	for i := range c.txPriority {
		s.TxPriority[i] = c.txPriority[i].Load()
	}
	for i := range c.drops {
		if v := c.drops[i].Load(); v > 0 {
			s.Drops[DropReason(i)] = v
		}
	}
	c.snapshotHists(&s)
	e.mu.Lock()
	s.ClientRPCs, s.ServerRPCs, s.Peers = len(e.clients), len(e.servers), len(e.peers)
	s.Grants = e.sched.Stats()
	if e.pacer != nil {
		s.Pacer = e.pacer.Stats()
	}
	e.mu.Unlock()
	return s
}

// loadByType copies the non-zero counters of an array by packet type into
// a map.
func loadByType(a []atomic.Uint64, m map[wire.Type]uint64) {
	for i := range a {
		if v := a[i].Load(); v > 0 {
			m[wire.TypeData+wire.Type(i)] = v
		}
	}
}

// snapshotHists reads the histograms and what is derived from them.
func (c *counters) snapshotHists(s *Stats) {
	for i := range c.hist.latency {
		s.Latency[i] = c.hist.latency[i].snapshot()
	}
	for d := range c.hist.sizes {
		for k := range c.hist.sizes[d] {
			s.MessageSizes[d][k] = c.hist.sizes[d][k].snapshot()
		}
	}
	sz := &s.MessageSizes
	s.RequestBytesSent = sz[Sent][Request].Sum
	s.RequestBytesReceived = sz[Received][Request].Sum
	s.ResponseBytesSent = sz[Sent][Response].Sum
	s.ResponseBytesReceived = sz[Received][Response].Sum
	s.ServerRPCsCompleted = sz[Sent][Response].Count
}
