package contract

import (
	"github.com/homa-go/homa/grant"
	"github.com/homa-go/homa/homa/wire"
	"github.com/homa-go/homa/pacer"
)

// SizeClass groups RPCs by size for the latency histograms: the larger of
// the request and the response length, up to 1,000, 10,000, 100,000 and
// 1,000,000 bytes (MaxMessage). Short RPCs are dominated by software
// overheads, the longer classes by transmission and grants, so each class
// has its own latency distribution.
type SizeClass uint8

// Size classes.
const (
	Size1K   SizeClass = iota // up to 1,000 bytes
	Size10K                   // up to 10,000 bytes
	Size100K                  // up to 100,000 bytes
	Size1M                    // up to 1,000,000 bytes
	NumSizeClasses
)

var sizeClassNames = [NumSizeClasses]string{"1k", "10k", "100k", "1m"}

// sizeClassLimits are the inclusive upper bounds of the size classes.
var sizeClassLimits = [NumSizeClasses]uint32{1_000, 10_000, 100_000, MaxMessage}

// String is the class's label value: "1k", "10k", "100k" or "1m".
func (c SizeClass) String() string {
	if c < NumSizeClasses {
		return sizeClassNames[c]
	}
	return "invalid"
}

// Limit is the largest message length in the class.
func (c SizeClass) Limit() int {
	if c < NumSizeClasses {
		return int(sizeClassLimits[c])
	}
	return 0
}

// SizeClassOf returns the class of an RPC whose larger message has n
// bytes. Lengths beyond MaxMessage fall in the largest class.
func SizeClassOf(n int) SizeClass {
	for c := range NumSizeClasses {
		if n <= int(sizeClassLimits[c]) {
			return c
		}
	}
	return Size1M
}

// Direction tells a message the endpoint sent from one it received.
type Direction uint8

// Directions.
const (
	Sent Direction = iota
	Received
	NumDirections
)

// String is the direction's label value: "sent" or "received".
func (d Direction) String() string {
	switch d {
	case Sent:
		return "sent"
	case Received:
		return "received"
	}
	return "invalid"
}

// Kind tells requests from responses.
type Kind uint8

// Kinds of message.
const (
	Request Kind = iota
	Response
	NumKinds
)

// String is the kind's label value: "request" or "response".
func (k Kind) String() string {
	switch k {
	case Request:
		return "request"
	case Response:
		return "response"
	}
	return "invalid"
}

// Histogram is a snapshot of a fixed-bucket histogram.
type Histogram struct {
	// Bounds are the inclusive upper bounds of the buckets, ascending:
	// nanoseconds for latencies, bytes for sizes.
	Bounds []uint64
	// Counts are the observations per bucket (not cumulative):
	// Counts[i] for values in (Bounds[i-1], Bounds[i]], and the last,
	// len(Bounds), for values above every bound.
	Counts []uint64
	// Count is the number of observations, the sum of Counts.
	Count uint64
	// Sum is the sum of the observed values.
	Sum uint64
}

// Mean is the mean observed value, or 0 without observations.
func (h *Histogram) Mean() float64 {
	if h.Count == 0 {
		return 0
	}
	return float64(h.Sum) / float64(h.Count)
}

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
	// Writes counts the engine's writes of packets to its socket: a
	// system call each (sendmmsg where the transport batches), so the
	// packets sent over Writes is what a write carries. Zero on the
	// kernel backend.
	Writes uint64
	// TimerWakeups counts the times the shell's timer woke the endpoint
	// to run the core's deadlines: an idle endpoint has none.
	TimerWakeups uint64
	// The way a message takes from the socket to the application (see
	// the engine's package doc). ReaderParks counts the times a reader
	// parked on the socket and was woken (by a packet, a wake-up or its
	// context: a thread wake-up each, as a blocking read has);
	// ReaderSteals the times a goroutine in Recv woke the background
	// reader parked on the socket to read for itself (a goroutine
	// switch); Handoffs the complete messages handed to a goroutine other
	// than the one that read them (a goroutine wake-up each); and
	// TimerWakeupsVain the timer's wake-ups that found nothing due.
	ReaderParks      uint64
	ReaderSteals     uint64
	Handoffs         uint64
	TimerWakeupsVain uint64
	// TimerArms counts the runtime timers the endpoint set: its timer
	// reset to the core's next deadline, and the background reader's
	// grace armed. Setting one in an idle process wakes a thread (the
	// runtime's, to watch the new deadline), so a quiet RPC should set
	// none.
	TimerArms    uint64
	ResendsSent  uint64 // RESEND packets this endpoint issued
	NeedAcksSent uint64
	// NeedAcksDeferred counts the NEED_ACKs that waited for a turn
	// because their peer's budget for the tick was spent.
	NeedAcksDeferred uint64
	// TimersRun counts the protocol's timers that came due and ran: an
	// RPC's or a peer's, or a turn of the RESEND or NEED_ACK queues. An
	// idle socket runs none; a busy one, about what its RPCs need.
	TimersRun uint64
	// PeerTimeouts counts RPCs (client and server) ended because their
	// peer stopped answering for them.
	PeerTimeouts uint64
	Reclaimed    uint64 // server RPCs forgotten after client silence
	// ServersUnreachable counts server RPCs forgotten because the
	// network reported their client's host or port unreachable (an ICMP
	// report quoting the response).
	ServersUnreachable uint64
	// RTTSamples counts the round trips measured to stretch a slow
	// peer's timers (see Config.Resend).
	RTTSamples uint64
	// ResendsDeferred counts the RESENDs that waited for a turn because
	// their peer's budget (one a tick) or the core's
	// (Limits.ResendsPerTick) was spent.
	ResendsDeferred uint64
	// ResendsUnneeded counts the RESENDs for responses that proved not
	// needed: the server answered BUSY, or the bytes asked for arrived
	// in their first transmission. Each backs the RESEND timing toward
	// that server off (see resend.Backoff).
	ResendsUnneeded uint64
	CutoffsSent     uint64 // CUTOFFS packets sent to peers with stale versions
	// Resource accounting: Shed counts incoming messages discarded to
	// make room for others (the heaviest peer's least active first);
	// GrantsRevoked the messages that lost their grant because their
	// sender left granted bytes unsent; GrantsDeferred the grants held
	// back for lack of receive memory; PeersEvicted the idle peers
	// dropped from a full peer table; PeersExpired the peers let go
	// after a minute without RPCs or acknowledgments pending.
	Shed           uint64
	GrantsRevoked  uint64
	GrantsDeferred uint64
	PeersEvicted   uint64
	PeersExpired   uint64
	// Recalled counts the requests refused at the bound of requests
	// awaiting replies (Limits.PendingReplies and PendingRepliesPerPeer,
	// counted in Drops as DropLimit) that the server asked for again
	// when replies made room; RecallsLapsed those whose client did not
	// send the request again in time (it retries on its own).
	Recalled, RecallsLapsed uint64
	// Duplicate protection (the finished ids a server remembers per
	// client port): SeenExpired counts the records let go because their
	// port was silent long enough that no copy of its requests can still
	// arrive; SeenEvicted those forgotten, least recently active first,
	// to make room in a full table; SeenClients is the records held.
	SeenExpired, SeenEvicted uint64
	SeenClients              int
	// Message bytes: requests sent by clients and received by servers,
	// responses sent by servers and received by clients (the sums of
	// MessageSizes).
	RequestBytesSent, RequestBytesReceived   uint64
	ResponseBytesSent, ResponseBytesReceived uint64
	// Current state: RPCs and peers held, receive storage committed
	// (bytes), server RPCs whose request is arriving, and those whose
	// request awaits a reply.
	ClientRPCs, ServerRPCs, Peers int
	// SpareRPCs is the RPC structures kept for reuse; after load they go
	// within two trims of the engine's (about a second apart).
	SpareRPCs                    int
	RecvMemory                   int
	IncomingRPCs, PendingReplies int

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
	// IncomingLent is, for a socket of several shards, the bytes the
	// shards' shared incoming budget lends them now beyond their floors
	// (Grants.Limit adds the floors and the loans); zero otherwise.
	IncomingLent int
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

// BufferStats describes the user-space engine's message buffer pool.
// There is one pool per process, shared by every endpoint. Each endpoint
// also caches a few buffers of its own: Gets counts those its cache hands
// out, and Free leaves out those it holds (of each size up to 64 KiB, at
// most 32 buffers and 128 KiB).
type BufferStats struct {
	// Gets counts the buffers handed out (messages and packets), and
	// Allocs those of them the pool had to allocate; AllocBytes is the
	// capacity of the allocated buffers.
	Gets, Allocs, AllocBytes uint64
	// Discards counts returned buffers the pool left to the garbage
	// collector because their free list was full.
	Discards uint64
	// Trimmed counts free buffers the pool let go of because they went
	// unused for a while (after a burst of load).
	Trimmed uint64
	// Free and FreeBytes are the buffers held in the free lists now and
	// their capacity.
	Free, FreeBytes uint64
	// CachedBytes is the capacity of the buffers the endpoints' caches
	// hold now. Pool and caches give back what load left in them at the
	// endpoints' trims, about a second apart: FreeBytes+CachedBytes is
	// zero a few seconds after the load stops.
	CachedBytes uint64
}
