package homa

import (
	"errors"
	"net"
)

// Errors returned by Endpoint methods. Test for them with errors.Is.
var (
	// ErrClosed is returned after Close. It wraps net.ErrClosed.
	ErrClosed = closedError{}
	// ErrMessageTooLong means a message is empty or over MaxMessage bytes.
	ErrMessageTooLong = errors.New("homa: message length must be 1..1000000 bytes")
	// ErrUnknownRPC means no RPC with that id (and peer) exists here.
	ErrUnknownRPC = errors.New("homa: unknown RPC")
	// ErrAborted is the result of an RPC ended by Abort.
	ErrAborted = errors.New("homa: RPC aborted")
	// ErrPeerTimeout means the peer stopped answering.
	ErrPeerTimeout = errors.New("homa: peer timed out")
	// ErrBadAddress means a destination the endpoint cannot reach: the
	// wrong address family, or port 0.
	ErrBadAddress = errors.New("homa: bad destination address")
	// ErrAlreadyReplied means Reply was called twice for one request, or
	// for a request that is not waiting for a response.
	ErrAlreadyReplied = errors.New("homa: request already answered")
	// ErrAlreadyWaiting means another goroutine is already in Recv for
	// the same RPC id.
	ErrAlreadyWaiting = errors.New("homa: another Recv waits for this RPC")
)

type closedError struct{}

func (closedError) Error() string        { return "homa: endpoint closed" }
func (closedError) Unwrap() error        { return net.ErrClosed }
func (closedError) Is(target error) bool { return target == net.ErrClosed }
