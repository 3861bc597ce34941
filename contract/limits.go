package contract

import "github.com/homa-go/homa/homa/wire"

// MaxMessage is the largest message Homa carries, in bytes.
const MaxMessage = wire.MaxMessageLength

// Homa port ranges, as the Linux implementation defines them: servers
// bind ports 1..MaxServerPort; client sockets are given ports from
// MinClientPort up to MaxPort.
const (
	MaxServerPort = MinClientPort - 1
	MinClientPort = 32768
	MaxPort       = 65535
)

// Limits bound every resource a peer can make a socket hold. Each has a
// global bound and a share per peer host, so that one host cannot take
// what others need: when a bound is reached, a socket sheds the work of
// the host (and, within it, of the client port) holding the most, and
// only refuses a newcomer when it is itself the heaviest. Zero means the
// default.
type Limits struct {
	// RecvMemory bounds the payload bytes of incoming messages: those
	// arriving, and complete requests the application has not taken yet.
	// Memory is committed as bytes arrive (at most four times what a
	// message has brought, times the rounding of the buffer pool's size
	// classes, which is below two), never from the length a sender
	// claims, and
	// grants are given only while it lasts.
	// Default 64 MiB. Both it and RecvMemoryPerPeer are at least what
	// one message of MaxMessage bytes holds at its peak beside the bytes
	// the grant scheduler may have outstanding (about 2.4 MB by default).
	RecvMemory int
	// RecvMemoryPerPeer bounds one host's share. Default RecvMemory/4.
	RecvMemoryPerPeer int
	// IncomingRPCs bounds the server RPCs whose request is still
	// arriving. Default 10,000.
	IncomingRPCs int
	// IncomingRPCsPerPeer bounds one host's share. Default 2,000.
	IncomingRPCsPerPeer int
	// PendingReplies bounds the server RPCs whose request is complete
	// and not yet answered by the application. A request beyond it is
	// refused, and asked for again when a reply makes room, oldest
	// first, so that a backlog comes in at the pace the application
	// answers (up to PendingReplies refusals are remembered per host,
	// twice that in all; their clients retry the others). Default
	// 10,000.
	PendingReplies int
	// PendingRepliesPerPeer bounds one host's share. Default 2,000.
	PendingRepliesPerPeer int
	// Peers bounds the peer table; hosts with no RPC are evicted, least
	// recently used first, to make room. Default 16,384.
	Peers int
	// GrantTimeoutTicks is how long (in ticks) an incoming message may
	// leave granted bytes unsent before it loses its grant, so that
	// silent senders cannot hold the incoming budget. It gets it back
	// when bytes arrive again. Default ResendTicks + ResendInterval;
	// like them, it stretches toward a peer with a longer round trip.
	GrantTimeoutTicks int
	// ResendsPerTick bounds the RESENDs a socket sends per tick, to all
	// peers (each peer gets at most one per tick): a RESEND costs a
	// packet, and forged first packets from many addresses would
	// otherwise have a socket spend its CPU asking silent hosts again.
	// RPCs over the budget wait for their turn, peers served in turn.
	// Default 16 (16,000 a second at 1 ms ticks).
	ResendsPerTick int
}
