package homa

import (
	"errors"
	"sync/atomic"

	"github.com/homa-go/homa/grant"
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
// Stats.
type counters struct {
	rxPackets        [numTypes]atomic.Uint64
	txPackets        [numTypes]atomic.Uint64
	drops            [numDropReasons]atomic.Uint64
	dupPackets       atomic.Uint64
	grantsSent       atomic.Uint64
	retransmits      atomic.Uint64
	rpcsStarted      atomic.Uint64
	rpcsCompleted    atomic.Uint64
	requestsReceived atomic.Uint64
	serverRPCsFreed  atomic.Uint64
	readErrors       atomic.Uint64
	writeErrors      atomic.Uint64
	resendsSent      atomic.Uint64
	needAcks         atomic.Uint64
	peerTimeouts     atomic.Uint64
	reclaimed        atomic.Uint64
	cutoffsSent      atomic.Uint64
}

func (c *counters) drop(r DropReason) { c.drops[r].Add(1) }

func (c *counters) countTx(pkt []byte) {
	if t, err := wire.PeekType(pkt); err == nil {
		c.txPackets[typeIndex(t)].Add(1)
	}
}

// Stats is a snapshot of an endpoint's counters and state.
type Stats struct {
	RxPackets map[wire.Type]uint64 // received packets by type (valid type byte)
	TxPackets map[wire.Type]uint64 // sent packets by type
	Drops     map[DropReason]uint64
	// DuplicatePackets counts DATA that brought no new bytes.
	DuplicatePackets uint64
	GrantsSent       uint64
	Retransmits      uint64
	RPCsStarted      uint64 // client RPCs
	RPCsCompleted    uint64 // client RPCs whose response arrived
	RequestsReceived uint64 // server RPCs handed to the application
	ServerRPCsFreed  uint64 // server RPCs acknowledged and forgotten
	ReadErrors       uint64
	WriteErrors      uint64
	ResendsSent      uint64 // RESEND packets this endpoint issued
	NeedAcksSent     uint64
	PeerTimeouts     uint64 // peers declared dead
	Reclaimed        uint64 // server RPCs forgotten after client silence
	CutoffsSent      uint64 // CUTOFFS packets sent to peers with stale versions
	// Current state.
	ClientRPCs, ServerRPCs, Peers int

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
		RxPackets:        make(map[wire.Type]uint64),
		TxPackets:        make(map[wire.Type]uint64),
		Drops:            make(map[DropReason]uint64),
		DuplicatePackets: c.dupPackets.Load(),
		GrantsSent:       c.grantsSent.Load(),
		Retransmits:      c.retransmits.Load(),
		RPCsStarted:      c.rpcsStarted.Load(),
		RPCsCompleted:    c.rpcsCompleted.Load(),
		RequestsReceived: c.requestsReceived.Load(),
		ServerRPCsFreed:  c.serverRPCsFreed.Load(),
		ReadErrors:       c.readErrors.Load(),
		WriteErrors:      c.writeErrors.Load(),
		ResendsSent:      c.resendsSent.Load(),
		NeedAcksSent:     c.needAcks.Load(),
		PeerTimeouts:     c.peerTimeouts.Load(),
		Reclaimed:        c.reclaimed.Load(),
		CutoffsSent:      c.cutoffsSent.Load(),
	}
	for i := range c.rxPackets {
		t := wire.TypeData + wire.Type(i)
		if v := c.rxPackets[i].Load(); v > 0 {
			s.RxPackets[t] = v
		}
		if v := c.txPackets[i].Load(); v > 0 {
			s.TxPackets[t] = v
		}
	}
	for i := range c.drops {
		if v := c.drops[i].Load(); v > 0 {
			s.Drops[DropReason(i)] = v
		}
	}
	e.mu.Lock()
	s.ClientRPCs, s.ServerRPCs, s.Peers = len(e.clients), len(e.servers), len(e.peers)
	s.Grants = e.sched.Stats()
	if e.pacer != nil {
		s.Pacer = e.pacer.Stats()
	}
	e.mu.Unlock()
	return s
}
