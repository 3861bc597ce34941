package erpc

import (
	"errors"
	"fmt"

	"github.com/homa-go/homa/sock"
)

// Errors. Test for them with errors.Is: an error from this package wraps
// the transport's error when there is one (sock.ErrPeerTimeout,
// sock.ErrClosed, sock.ErrMessageTooLong, ...), so both match.
var (
	// ErrClosed: the Rpc or its Nexus is closed. It matches sock.ErrClosed
	// and net.ErrClosed.
	ErrClosed error = &wrapError{"erpc: closed", sock.ErrClosed}
	// ErrMessageTooLarge: a message is larger than Config.MaxMessage (an
	// exactly-once response, than the server's
	// ExactlyOnceConfig.MaxResponse). It matches sock.ErrMessageTooLong.
	ErrMessageTooLarge error = &limitError{"erpc: message too large: larger than Config.MaxMessage " +
		"(an exactly-once response: than ExactlyOnceConfig.MaxResponse)"}
	// ErrNoSuchService: the server has no handler for the request type.
	ErrNoSuchService = errors.New("erpc: no handler for the request type at the server")
	// ErrNoSuchRpc: the remote Nexus has no Rpc with the id asked for.
	ErrNoSuchRpc = errors.New("erpc: no Rpc with that id at the remote Nexus")
	// ErrConnectFailed: a session could not be established. The error
	// also matches the cause: ErrNoSuchRpc, ErrTooManySessions,
	// sock.ErrPeerTimeout (nobody answered), ErrTimeout, ...
	ErrConnectFailed = errors.New("erpc: connect failed")
	// ErrSessionReset: the session's server was declared dead (the error
	// also matches sock.ErrPeerTimeout then) or no longer knows the
	// session. Every pending request of the session fails with it.
	ErrSessionReset = errors.New("erpc: session reset")
	// ErrNoSession: the Session value names no live session of this Rpc.
	ErrNoSession = errors.New("erpc: no such session")
	// ErrSessionBusy: DestroySession was called on a session with
	// requests pending.
	ErrSessionBusy = errors.New("erpc: session has pending requests")
	// ErrNotConnected: the session is being destroyed, failed to connect
	// or was reset, and takes no requests.
	ErrNotConnected = errors.New("erpc: session not connected")
	// ErrTimeout: an exactly-once request was not answered after all its
	// attempts, or a connect request within Config.ConnectTimeout.
	ErrTimeout = errors.New("erpc: timed out")
	// ErrStale: the server had already acknowledged and forgotten the
	// exactly-once sequence.
	ErrStale = errors.New("erpc: stale exactly-once request")
	// ErrProtocol: a peer sent a message that does not parse. Specific
	// causes are *ProtocolError values, which match it.
	ErrProtocol = errors.New("erpc: protocol error")
	// ErrConfig: a configuration was rejected. Specific causes are
	// *ConfigError values, which match it.
	ErrConfig = errors.New("erpc: invalid configuration")
	// ErrBufferInUse: a MsgBuffer given to the layer is still held by a
	// pending request.
	ErrBufferInUse = errors.New("erpc: message buffer in use by a pending request")
	// ErrInEventLoop: a call that runs the event loop (Call,
	// RunEventLoop, ...) was made from inside it: from a continuation or
	// a dispatch handler.
	ErrInEventLoop = errors.New("erpc: event loop already running")
	// ErrBadHandle: EnqueueResponse got a handle that is not a pending
	// request of this Rpc (answered already, or another Rpc's).
	ErrBadHandle = errors.New("erpc: request handle not pending")
	// ErrNotOwner: an owner-only method of an Rpc was called from a
	// second goroutine while the owner was using the Rpc. Specific
	// causes are *OwnerError values, which match it. Use Rpc.Submit.
	ErrNotOwner = errors.New("erpc: Rpc used by a goroutine other than its owner")
	// ErrRpcIDInUse: NewRpc was given an id another Rpc of the Nexus has.
	ErrRpcIDInUse = errors.New("erpc: Rpc id in use")
	// ErrRegisterTooLate: Register was called after the first Rpc was
	// created; the handler table is fixed from then on, so that event
	// loops read it without locks.
	ErrRegisterTooLate = errors.New("erpc: handlers must be registered before the first Rpc")

	// ErrLeaseExpired: the server forgot this client's lease (it heard
	// nothing from it for its LeaseTimeout, or it restarted), with its
	// sessions and exactly-once records. Requests pending under it may
	// or may not have run. Sessions fail with it (wrapped in
	// ErrSessionReset); new sessions get a new lease.
	ErrLeaseExpired = errors.New("erpc: lease expired: the server forgot this client's sessions and records")
	// ErrResponseLost: an exactly-once request ran at the server, but its
	// response did not fit in the server's records
	// (ExactlyOnceConfig.MaxRecordBytes) and the attempt that carried it
	// was lost. The handler did not run again.
	ErrResponseLost = errors.New("erpc: exactly-once request ran, but its response was not kept")

	// ErrRetryable is matched by every error that says "not now" rather
	// than "no": the request was not executed and may be sent again.
	ErrRetryable = errors.New("erpc: retryable")
	// ErrTooManySessions: a session table (this Rpc's, or the server
	// Rpc's) is full, or this client host holds its share of the
	// server's sessions or leases (Config.MaxServerSessionsPerHost,
	// MaxLeasesPerHost). Retryable.
	ErrTooManySessions error = &retryableError{"erpc: too many sessions"}
	// ErrQueueFull: the session already queues Config.MaxQueuedRequests
	// requests. Retryable.
	ErrQueueFull error = &retryableError{"erpc: session request queue full"}
	// ErrServerBusy: the server's background queue was full; the request
	// was not executed. Retryable.
	ErrServerBusy error = &retryableError{"erpc: server background queue full"}
	// ErrRecordsFull: the server had no room for another exactly-once
	// completion record, in all or in this client host's share; the
	// request was not executed. Retryable.
	ErrRecordsFull error = &retryableError{"erpc: exactly-once completion records full"}
)

// wrapError is a fixed error that wraps a transport error.
type wrapError struct {
	msg string
	err error
}

func (e *wrapError) Error() string { return e.msg + ": " + e.err.Error() }
func (e *wrapError) Unwrap() error { return e.err }

// limitError is a fixed error that matches ErrMessageTooLarge and
// sock.ErrMessageTooLong, with a message of its own (the transport's names
// its own limit, not the layer's).
type limitError struct{ msg string }

func (e *limitError) Error() string { return e.msg }
func (e *limitError) Is(target error) bool {
	return target == ErrMessageTooLarge || target == sock.ErrMessageTooLong
}

// errResponseTooLarge: the server's handler answered an exactly-once
// request with more than the server's MaxResponse.
var errResponseTooLarge error = &limitError{"erpc: the exactly-once response was larger than the server's " +
	"ExactlyOnceConfig.MaxResponse; the request ran, its response was replaced by this error"}

// errServerTooLarge: the server refused a large request, or could not
// keep a large response, for its limits.
var errServerTooLarge error = &limitError{"erpc: message too large for the server: the request, or its response, " +
	"exceeds the server's Config.MaxMessage or the room left in its LargeMessageBytes"}

// errLargeGone: the server no longer had the large response being pulled.
var errLargeGone = errors.New("erpc: the server dropped the large response being fetched (MessageTimeout passed)")

// retryableError is a fixed error that matches ErrRetryable.
type retryableError struct{ msg string }

func (e *retryableError) Error() string        { return e.msg }
func (e *retryableError) Is(target error) bool { return target == ErrRetryable }

// ProtocolError describes a message that broke the wire format. It matches
// ErrProtocol.
type ProtocolError struct {
	Reason string
}

func (e *ProtocolError) Error() string        { return "erpc: protocol error: " + e.Reason }
func (e *ProtocolError) Is(target error) bool { return target == ErrProtocol }

// ConfigError names the configuration field that was rejected and the rule
// it broke. It matches ErrConfig.
type ConfigError struct {
	Field string // e.g. "ExactlyOnce.RetryTimeout"
	Rule  string // what must hold, with the values found
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("erpc: invalid configuration: %s: %s", e.Field, e.Rule)
}
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }

// statusError maps a reply's status to the error the client sees.
func statusError(s status) error {
	switch s {
	case statusOK:
		return nil
	case statusNoSuchType:
		return ErrNoSuchService
	case statusNoSession:
		return fmt.Errorf("%w: the server does not know the session", ErrSessionReset)
	case statusNoSuchRpc:
		return ErrNoSuchRpc
	case statusTooManySessions:
		return ErrTooManySessions
	case statusRecordsFull:
		return ErrRecordsFull
	case statusServerBusy:
		return ErrServerBusy
	case statusStale:
		return ErrStale
	case statusTooLarge:
		return errResponseTooLarge
	case statusLeaseExpired:
		return fmt.Errorf("%w: %w", ErrConnectFailed, ErrLeaseExpired)
	case statusResponseLost:
		return ErrResponseLost
	case statusBadRequest:
		return &ProtocolError{"the server could not parse the request"}
	}
	return &ProtocolError{"unexpected status"}
}

// closedError wraps err (a transport error that means the socket closed)
// as ErrClosed.
func closedError(err error) error {
	if errors.Is(err, sock.ErrClosed) {
		return ErrClosed
	}
	return err
}
