package homa

import (
	"errors"
	"net"

	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/internal/mailbox"
)

// Message is a complete request or response handed to the application,
// or the failure of a client RPC. See core.Message.
type Message = core.Message

// Stats is a snapshot of an endpoint's counters. See core.Stats.
type Stats = core.Stats

// OpError is the error of one RPC: operation, peer, id and cause. It
// matches its cause with errors.Is. See core.OpError.
type OpError = core.OpError

// Statistics types and their values; see package core.
type (
	DropReason = core.DropReason
	Histogram  = core.Histogram
	SizeClass  = core.SizeClass
	Direction  = core.Direction
	Kind       = core.Kind
)

// Drop reasons.
const (
	DropShort       = core.DropShort
	DropUnknownType = core.DropUnknownType
	DropBadField    = core.DropBadField
	DropUnknownRPC  = core.DropUnknownRPC
	DropLimit       = core.DropLimit
	DropOtherPort   = core.DropOtherPort
	DropIgnored     = core.DropIgnored
	DropStale       = core.DropStale
	DropMemory      = core.DropMemory
	DropSocket      = core.DropSocket
	DropQueue       = core.DropQueue
	NumDropReasons  = core.NumDropReasons
)

// Size classes, directions and kinds of the histograms.
const (
	Size1K         = core.Size1K
	Size10K        = core.Size10K
	Size100K       = core.Size100K
	Size1M         = core.Size1M
	NumSizeClasses = core.NumSizeClasses
	Sent           = core.Sent
	Received       = core.Received
	NumDirections  = core.NumDirections
	Request        = core.Request
	Response       = core.Response
	NumKinds       = core.NumKinds
)

// SizeClassOf returns the size class of an RPC whose larger message has
// n bytes.
func SizeClassOf(n int) SizeClass { return core.SizeClassOf(n) }

// Errors returned by Endpoint methods and carried by failed RPCs. Test
// for them with errors.Is.
var (
	// ErrClosed is returned after Close. It matches net.ErrClosed.
	ErrClosed = closedError{}
	// ErrMessageTooLong means a message is empty or over MaxMessage bytes.
	ErrMessageTooLong = core.ErrMessageTooLong
	// ErrUnknownRPC means no RPC with that id (and peer) exists here.
	ErrUnknownRPC = core.ErrUnknownRPC
	// ErrAborted is the result of an RPC ended by Abort.
	ErrAborted = core.ErrAborted
	// ErrPeerTimeout means the peer stopped answering for the RPC. It
	// reports Timeout() true.
	ErrPeerTimeout = core.ErrPeerTimeout
	// ErrNoListener means nothing listens on the peer's port (see
	// core.ErrNoListener for where this can be known).
	ErrNoListener = core.ErrNoListener
	// ErrHostUnreachable means the network reported the peer's host
	// unreachable.
	ErrHostUnreachable = core.ErrHostUnreachable
	// ErrBadAddress means an address the endpoint cannot use.
	ErrBadAddress = core.ErrBadAddress
	// ErrAlreadyReplied means Reply was called twice for one request, or
	// for a request that is not waiting for a response.
	ErrAlreadyReplied = core.ErrAlreadyReplied
	// ErrAlreadyWaiting means another goroutine is already in Recv for
	// the same RPC id.
	ErrAlreadyWaiting = mailbox.ErrAlreadyWaiting
	// ErrBusy means a local limit refused new work; retry later.
	ErrBusy = core.ErrBusy
)

type closedError struct{}

func (closedError) Error() string        { return "endpoint closed" }
func (closedError) Unwrap() error        { return net.ErrClosed }
func (closedError) Is(target error) bool { return target == net.ErrClosed || target == core.ErrClosed }

// shellErr maps the core's and the mailbox's errors to the endpoint's.
func shellErr(err error) error {
	if errors.Is(err, core.ErrClosed) {
		return ErrClosed
	}
	return err
}
