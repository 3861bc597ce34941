package contract

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// Errors of RPCs and of sockets, the same from either backend. Test for
// them with errors.Is: a failed RPC's error is an *OpError that wraps one
// of them.
var (
	// ErrClosed is returned after Close. It matches net.ErrClosed.
	ErrClosed error = closedError{}
	// ErrMessageTooLong means a message is empty or over MaxMessage bytes.
	ErrMessageTooLong = errors.New("message length must be 1..1000000 bytes")
	// ErrUnknownRPC means no RPC with that id (and peer) exists here.
	ErrUnknownRPC = errors.New("unknown RPC")
	// ErrAborted is the result of an RPC ended by Abort.
	ErrAborted = errors.New("RPC aborted")
	// ErrPeerTimeout means the peer stopped answering for this RPC: it
	// sent nothing about it through Resend.TimeoutResends RESENDs. It
	// reports Timeout() true, like the net package's timeouts.
	ErrPeerTimeout error = timeoutError{}
	// ErrNoListener means nothing listens on the peer's Homa port, as the
	// network reported it (ICMP port or protocol unreachable). It comes
	// only where such a report exists: over UDP, and over raw IP from a
	// host that has no Homa at all or whose Homa answers so; elsewhere a
	// missing listener shows as ErrPeerTimeout.
	ErrNoListener = errors.New("no Homa listener at the peer's port")
	// ErrHostUnreachable means the network reported the peer's host
	// unreachable (an ICMP destination-unreachable other than port or
	// protocol).
	ErrHostUnreachable = errors.New("peer host unreachable")
	// ErrBadAddress means an address the endpoint cannot use: the wrong
	// address family, or port 0.
	ErrBadAddress = errors.New("bad address")
	// ErrAlreadyReplied means Reply was called twice for one request, or
	// for a request that is not waiting for a response.
	ErrAlreadyReplied = errors.New("request already answered")
	// ErrBusy means a local limit refused new work (too many RPCs in
	// progress); the call may be retried later.
	ErrBusy = errors.New("endpoint busy: too many RPCs in progress")
	// ErrAlreadyWaiting means another goroutine is already in Recv for
	// the same RPC id.
	ErrAlreadyWaiting = errors.New("another Recv waits for this RPC")
	// ErrPermission means the process may not open raw sockets. Use UDP
	// encapsulation, or grant CAP_NET_RAW.
	ErrPermission = errors.New("netio: raw IP sockets need CAP_NET_RAW (run as root, grant the capability, or use UDP encapsulation)")
	// ErrPortInUse means another socket on this host holds the Homa port.
	ErrPortInUse = errors.New("netio: Homa port in use")
	// ErrNoKernelHoma means the kernel has no Homa module (or the
	// platform is not Linux): the kernel backend cannot open a socket.
	ErrNoKernelHoma = errors.New("khoma: the kernel has no Homa module (IP protocol 146 sockets are not supported)")
)

// closedError is ErrClosed: it unwraps to net.ErrClosed, so that code
// written for the net package's sockets recognizes it.
type closedError struct{}

func (closedError) Error() string { return "endpoint closed" }
func (closedError) Unwrap() error { return net.ErrClosed }

// timeoutError is ErrPeerTimeout: a net.Error-style timeout.
type timeoutError struct{}

func (timeoutError) Error() string   { return "peer timed out" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// OpError is the error of one RPC: what was done, with whom, and why. It
// wraps one of the package's sentinel errors (errors.Is matches it) and
// reports Timeout() when the cause does.
type OpError struct {
	// Op is the operation: "send", "reply", "recv" (a client RPC that
	// failed while its response was awaited) or "abort".
	Op string
	// Peer is the other end of the RPC, when known.
	Peer netip.AddrPort
	// ID is the RPC id as this endpoint knows it (0 when there is none).
	ID uint64
	// Err is the cause.
	Err error
}

// Error leads with what happened and keeps the RPC id, for debugging,
// last: "recv from 127.0.0.1:6199: peer timed out (rpc 9223586087705187306)".
func (e *OpError) Error() string {
	s := e.Op
	if e.Peer.IsValid() {
		s += " " + peerPreposition(e.Op) + " " + e.Peer.String()
	}
	s += ": " + e.Err.Error()
	if e.ID != 0 {
		s += fmt.Sprintf(" (rpc %d)", e.ID)
	}
	return s
}

// peerPreposition is how an error of op names the peer: a message goes
// to it or comes from it; other operations are with it.
func peerPreposition(op string) string {
	switch op {
	case "send", "reply", "call":
		return "to"
	case "recv":
		return "from"
	}
	return "with"
}

func (e *OpError) Unwrap() error { return e.Err }

// Timeout reports whether the RPC failed because its peer timed out.
func (e *OpError) Timeout() bool {
	t, ok := e.Err.(interface{ Timeout() bool })
	return ok && t.Timeout()
}
