package core

import (
	"errors"

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
	DropBadField                      // a field out of range or inconsistent (an empty DATA among them)
	DropUnknownRPC                    // no RPC (or peer) matches it
	DropLimit                         // a limit on RPCs or peers refused new work
	DropOtherPort                     // addressed to, or acknowledging, another port
	DropIgnored                       // a type that is read and ignored (FREEZE)
	DropStale                         // a late duplicate of a finished RPC
	DropMemory                        // receive memory limit: no room for its bytes
	DropSocket                        // discarded by the socket layer before parsing (short, other port, too long)
	DropQueue                         // dropped by the kernel at the socket: its receive queue was full
	NumDropReasons
)

var dropNames = [NumDropReasons]string{"short", "unknown_type", "bad_field", "unknown_rpc", "limit", "other_port", "ignored", "stale", "memory", "socket", "queue"}

func (r DropReason) String() string {
	if r < NumDropReasons {
		return dropNames[r]
	}
	return "invalid"
}

func dropReasonOf(err error) DropReason {
	if errors.Is(err, wire.ErrShort) {
		return DropShort
	}
	return DropUnknownType
}

// numTypes covers every packet type byte from DATA (0x10) to ACK (0x18).
const numTypes = int(wire.TypeAck-wire.TypeData) + 1

func typeIndex(t wire.Type) int { return int(t - wire.TypeData) }

// TypeIndex maps a packet type to 0..NumTypes-1 (for counters by type);
// ok is false for a byte that is not a Homa type.
func TypeIndex(t wire.Type) (i int, ok bool) {
	i = typeIndex(t)
	return i, i >= 0 && i < numTypes
}

// NumTypes is the number of packet types TypeIndex maps.
const NumTypes = numTypes

// counters are the core's statistics. The core is driven by one caller
// at a time, so they are plain integers, read by Stats under the same
// serialization.
type counters struct {
	rxPackets, rxBytes [numTypes]uint64
	Drops              [NumDropReasons]uint64
	DuplicatePackets   uint64
	GrantsSent         uint64
	Retransmits        uint64
	ResentPackets      uint64
	RPCsStarted        uint64
	RPCsCompleted      uint64
	RPCsAborted        uint64
	RPCTimeouts        uint64
	ServerRPCsStarted  uint64
	RequestsReceived   uint64
	ServerRPCsFreed    uint64
	ResendsSent        uint64
	NeedAcksSent       uint64
	PeerTimeouts       uint64
	Reclaimed          uint64
	CutoffsSent        uint64
	Shed               uint64
	GrantsRevoked      uint64
	GrantsDeferred     uint64
	ResendsIgnored     uint64
	PeersEvicted       uint64
	Unreachable        uint64
	RTTSamples         uint64
	ResendsDeferred    uint64
	LandedPackets      uint64
	MovedPackets       uint64

	hist histograms
}

func (s *counters) init() { s.hist.init() }

// countRx counts a received packet of type t and n bytes.
func (s *counters) countRx(t wire.Type, n int) {
	i := typeIndex(t)
	s.rxPackets[i]++
	s.rxBytes[i] += uint64(n)
}

// Stats is a snapshot of an endpoint's counters and state. Byte counts of
// packets are Homa packets, header included, without the IP (or UDP)
// header below. The core fills everything but the transmit and I/O
// counters, which its shell keeps.
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
	// LandedPackets counts the packets a read put where they belong in
	// their message (received in place, see Lend); MovedPackets those
	// it put where another was expected, whose bytes were moved back.
	LandedPackets uint64
	MovedPackets  uint64
	GrantsSent    uint64
	// Retransmits counts retransmissions (one per range asked for or
	// restarted), ResentPackets the DATA packets they sent, and
	// ResendsIgnored the RESENDs left unanswered because what they asked
	// for was retransmitted less than a resend interval before.
	Retransmits    uint64
	ResentPackets  uint64
	ResendsIgnored uint64
	RPCsStarted    uint64 // client RPCs
	RPCsCompleted  uint64 // client RPCs whose response arrived
	RPCsAborted    uint64 // client RPCs ended by Abort
	RPCTimeouts    uint64 // client RPCs failed with ErrPeerTimeout
	// RPCsUnreachable counts client RPCs failed by an ICMP report
	// (ErrNoListener, ErrHostUnreachable).
	RPCsUnreachable uint64
	// ServerRPCsStarted counts server RPCs created by a request's first
	// packet; RequestsReceived those whose request went to the
	// application, and ServerRPCsCompleted those it answered with Reply.
	ServerRPCsStarted   uint64
	RequestsReceived    uint64
	ServerRPCsCompleted uint64
	ServerRPCsFreed     uint64 // server RPCs acknowledged and forgotten
	ReadErrors          uint64
	WriteErrors         uint64
	// TimerWakeups counts the times the shell's timer woke the endpoint
	// to run the core's deadlines: an idle endpoint has none.
	TimerWakeups uint64
	ResendsSent  uint64 // RESEND packets this endpoint issued
	NeedAcksSent uint64
	// PeerTimeouts counts RPCs (client and server) ended because their
	// peer stopped answering for them.
	PeerTimeouts uint64
	Reclaimed    uint64 // server RPCs forgotten after client silence
	// RTTSamples counts the round trips measured to stretch a slow
	// peer's timers (see Config.Resend).
	RTTSamples uint64
	// ResendsDeferred counts the RESENDs that waited for a turn because
	// their peer's budget (one a tick) or the core's
	// (Limits.ResendsPerTick) was spent.
	ResendsDeferred uint64
	CutoffsSent     uint64 // CUTOFFS packets sent to peers with stale versions
	// Resource accounting: Shed counts incoming messages discarded to
	// make room for others (the heaviest peer's least active first);
	// GrantsRevoked the messages that lost their grant because their
	// sender left granted bytes unsent; GrantsDeferred the grants held
	// back for lack of receive memory; PeersEvicted the idle peers
	// dropped from a full peer table.
	Shed           uint64
	GrantsRevoked  uint64
	GrantsDeferred uint64
	PeersEvicted   uint64
	// Message bytes: requests sent by clients and received by servers,
	// responses sent by servers and received by clients (the sums of
	// MessageSizes).
	RequestBytesSent, RequestBytesReceived   uint64
	ResponseBytesSent, ResponseBytesReceived uint64
	// Current state: RPCs and peers held, receive storage committed
	// (bytes), server RPCs whose request is arriving, and those whose
	// request awaits a reply.
	ClientRPCs, ServerRPCs, Peers int
	RecvMemory                    int
	IncomingRPCs, PendingReplies  int

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

// Stats returns a snapshot of the core's counters and state. The
// transmit counters (TxPackets, TxBytes, TxPriority) and I/O errors are
// the shell's to fill.
func (c *Core) Stats() Stats {
	k := &c.stats
	s := Stats{
		RxPackets:         make(map[wire.Type]uint64),
		RxBytes:           make(map[wire.Type]uint64),
		TxPackets:         make(map[wire.Type]uint64),
		TxBytes:           make(map[wire.Type]uint64),
		Drops:             make(map[DropReason]uint64),
		DuplicatePackets:  k.DuplicatePackets,
		LandedPackets:     k.LandedPackets,
		MovedPackets:      k.MovedPackets,
		GrantsSent:        k.GrantsSent,
		Retransmits:       k.Retransmits,
		ResentPackets:     k.ResentPackets,
		ResendsIgnored:    k.ResendsIgnored,
		RPCsStarted:       k.RPCsStarted,
		RPCsCompleted:     k.RPCsCompleted,
		RPCsAborted:       k.RPCsAborted,
		RPCTimeouts:       k.RPCTimeouts,
		RPCsUnreachable:   k.Unreachable,
		ServerRPCsStarted: k.ServerRPCsStarted,
		RequestsReceived:  k.RequestsReceived,
		ServerRPCsFreed:   k.ServerRPCsFreed,
		ResendsSent:       k.ResendsSent,
		NeedAcksSent:      k.NeedAcksSent,
		PeerTimeouts:      k.PeerTimeouts,
		Reclaimed:         k.Reclaimed,
		RTTSamples:        k.RTTSamples,
		ResendsDeferred:   k.ResendsDeferred,
		CutoffsSent:       k.CutoffsSent,
		Shed:              k.Shed,
		GrantsRevoked:     k.GrantsRevoked,
		GrantsDeferred:    k.GrantsDeferred,
		PeersEvicted:      k.PeersEvicted,
		ClientRPCs:        len(c.clients),
		ServerRPCs:        c.servers.len(),
		Peers:             len(c.peers),
		RecvMemory:        c.mem,
		IncomingRPCs:      c.incoming,
		PendingReplies:    c.pending,
		Grants:            c.sched.Stats(),
	}
	for i := range k.rxPackets {
		if k.rxPackets[i] > 0 {
			t := wire.TypeData + wire.Type(i)
			s.RxPackets[t] = k.rxPackets[i]
			s.RxBytes[t] = k.rxBytes[i]
		}
	}
	for i, v := range k.Drops {
		if v > 0 {
			s.Drops[DropReason(i)] = v
		}
	}
	if c.pacer != nil {
		s.Pacer = c.pacer.Stats()
	}
	for i := range k.hist.latency {
		s.Latency[i] = k.hist.latency[i].snapshot()
	}
	for d := range k.hist.sizes {
		for j := range k.hist.sizes[d] {
			s.MessageSizes[d][j] = k.hist.sizes[d][j].snapshot()
		}
	}
	sz := &s.MessageSizes
	s.RequestBytesSent = sz[Sent][Request].Sum
	s.RequestBytesReceived = sz[Received][Request].Sum
	s.ResponseBytesSent = sz[Sent][Response].Sum
	s.ResponseBytesReceived = sz[Received][Response].Sum
	s.ServerRPCsCompleted = sz[Sent][Response].Count
	return s
}
