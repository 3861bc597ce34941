package sock

import (
	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/wire"
)

// The socket contract (package contract), which both backends keep, as
// this package names it.

// Message is a complete request or response from Recv, or the failure
// of a client RPC. Its fields:
//
//   - ID is the RPC's id on this socket: even for a request this socket
//     sent (the Message is its response), odd for a request it received
//     (answer it with Reply).
//   - Peer is the other end, host and Homa port.
//   - Cookie is the value given to Send (responses only).
//   - Data is the message. It belongs to the receiver; Release returns
//     it to the socket's buffer pool (optional; it saves an allocation).
//   - Err is set, and Data nil, when a client RPC failed: an *OpError
//     whose cause matches ErrPeerTimeout, ErrNoListener, ErrAborted, ...
//     with errors.Is.
//
// IsRequest reports whether it is a request.
type Message = contract.Message

// Stats is a snapshot of a socket's counters: packets and bytes by type,
// drops by reason, RPCs by role, grants, pacing, resource use, latency
// and size histograms. Package metrics exports them to Prometheus.
type Stats = contract.Stats

// OpError is the error of one RPC: Op (send, reply, recv, abort, call),
// Peer, ID and the cause Err, which errors.Is matches (ErrPeerTimeout,
// ErrNoListener, ...). Timeout reports whether the peer timed out, as
// net errors do.
type OpError = contract.OpError

// Errors. Test for them with errors.Is: the errors of RPCs wrap them in
// an *OpError that says which RPC failed.
var (
	// ErrClosed: the socket is closed. It also matches net.ErrClosed.
	ErrClosed = contract.ErrClosed
	// ErrMessageTooLong: a message must hold 1 to 1,000,000 bytes.
	ErrMessageTooLong = contract.ErrMessageTooLong
	// ErrUnknownRPC: no RPC with that id exists on this socket.
	ErrUnknownRPC = contract.ErrUnknownRPC
	// ErrAborted: the RPC was ended by Abort.
	ErrAborted = contract.ErrAborted
	// ErrPeerTimeout: the peer said nothing about the RPC for
	// Config.PeerTimeout while being asked. It reports Timeout() true.
	ErrPeerTimeout = contract.ErrPeerTimeout
	// ErrNoListener: nothing listens on the peer's Homa port, as the
	// network reported at once (ICMP port or protocol unreachable). The
	// engine knows it over UDP, and over raw IP from a peer host with
	// no Homa at all or with the Linux module (which answers ICMP port
	// unreachable, rate limited by the peer's kernel). A peer host
	// whose Homa is this engine in another process says nothing for a
	// port nobody holds: then the RPC ends with ErrPeerTimeout.
	ErrNoListener = contract.ErrNoListener
	// ErrHostUnreachable: the network reported the peer host unreachable.
	ErrHostUnreachable = contract.ErrHostUnreachable
	// ErrBadAddress: an address or port the socket cannot use (the
	// error says whether the local or the remote one).
	ErrBadAddress = contract.ErrBadAddress
	// ErrAlreadyReplied: Reply was called twice for one request.
	ErrAlreadyReplied = contract.ErrAlreadyReplied
	// ErrAlreadyWaiting: another goroutine is in Recv for the same RPC.
	ErrAlreadyWaiting = contract.ErrAlreadyWaiting
	// ErrBusy: a limit of the socket refused new work for now (too many
	// RPCs or peers); retry later.
	ErrBusy = contract.ErrBusy
	// ErrPermission: raw sockets need CAP_NET_RAW. Run as root, grant the
	// capability (setcap cap_net_raw+ep BINARY), or use Transport UDP.
	ErrPermission = contract.ErrPermission
	// ErrPortInUse: another socket on this host holds the port.
	ErrPortInUse = contract.ErrPortInUse
)

// Sizes and ports.
const (
	// MaxMessage is the largest message Homa carries: 1,000,000 bytes.
	MaxMessage = contract.MaxMessage
	// MaxServerPort is the largest server port: server sockets bind
	// 1..MaxServerPort.
	MaxServerPort = contract.MaxServerPort
	// MinClientPort and MaxPort bound the ports given to client sockets.
	MinClientPort = contract.MinClientPort
	MaxPort       = contract.MaxPort
)

// The types of Stats: packet types, drop reasons, histograms and their
// classes.
type (
	// PacketType is the type of a Homa packet (Stats.RxPackets).
	PacketType = wire.Type
	// BufferStats describes the engine's buffer pool (ReadBufferStats).
	BufferStats = contract.BufferStats
	// DropReason says why a received packet was discarded (Stats.Drops).
	DropReason = contract.DropReason
	// Histogram is a snapshot of a fixed-bucket histogram.
	Histogram = contract.Histogram
	// SizeClass groups RPCs by the larger of their messages
	// (Stats.Latency).
	SizeClass = contract.SizeClass
	// Direction tells sent messages from received ones, and Kind
	// requests from responses (Stats.MessageSizes).
	Direction = contract.Direction
	Kind      = contract.Kind
)

// PacketTypes are the Homa packet types, DATA to ACK.
var PacketTypes = func() []PacketType {
	var l []PacketType
	for t := wire.TypeData; t <= wire.TypeAck; t++ {
		l = append(l, t)
	}
	return l
}()

// NumPriorities is the number of network priorities (Stats.TxPriority).
const NumPriorities = wire.NumPriorities

// ReadBufferStats returns a snapshot of the engine's message buffer pool,
// which every engine socket of the process shares.
func ReadBufferStats() BufferStats { return homa.ReadBufferStats() }

// Drop reasons, size classes, directions and kinds.
const (
	DropShort       = contract.DropShort
	DropUnknownType = contract.DropUnknownType
	DropBadField    = contract.DropBadField
	DropUnknownRPC  = contract.DropUnknownRPC
	DropLimit       = contract.DropLimit
	DropOtherPort   = contract.DropOtherPort
	DropIgnored     = contract.DropIgnored
	DropStale       = contract.DropStale
	DropMemory      = contract.DropMemory
	DropSocket      = contract.DropSocket
	DropQueue       = contract.DropQueue
	NumDropReasons  = contract.NumDropReasons

	Size1K         = contract.Size1K
	Size10K        = contract.Size10K
	Size100K       = contract.Size100K
	Size1M         = contract.Size1M
	NumSizeClasses = contract.NumSizeClasses

	Sent          = contract.Sent
	Received      = contract.Received
	NumDirections = contract.NumDirections
	Request       = contract.Request
	Response      = contract.Response
	NumKinds      = contract.NumKinds
)
