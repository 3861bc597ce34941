package khoma

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/homa-go/homa/contract"
)

// The module reports the failure of a client RPC through recvmsg: the
// call fails with an errno and names the RPC in homa_recvmsg_args.id.
// The errno is the one given to homa_rpc_abort, and its callers are the
// same in the module's linux_6.13.9 and main branches:
//
//   - ENOTCONN: an ICMP destination unreachable, port unreachable (ICMPv6
//     destination unreachable, port unreachable) answered a packet of the
//     RPC (homa_err_handler_v4/v6 abort every RPC to that address and
//     Homa port). The module itself sends that ICMP for a packet to a
//     port without a socket, so a request to a closed port fails a few
//     milliseconds after it leaves (on loopback, where ICMP is not rate
//     limited).
//   - EPROTONOSUPPORT: an ICMP destination unreachable, protocol
//     unreachable (ICMPv6 parameter problem, unrecognized next header):
//     the peer host has no Homa; every RPC to that host ends.
//   - EHOSTUNREACH: an ICMP destination unreachable with any other code
//     (network or host unreachable, fragmentation needed,
//     administratively prohibited, ...), or ICMPv6 destination
//     unreachable, address unreachable; every RPC to that host ends. The
//     other ICMPv6 destination unreachable codes (no route,
//     administratively prohibited) are ignored, and the RPC times out.
//   - ETIMEDOUT: homa_timer found the peer silent about the RPC for the
//     module's timeout_ticks while it asked with RESENDs.
//   - the errno HOMAIOCABORT names (homa_ioc_abort). Abort here passes 0,
//     which ends the RPC without a report; ECANCELED, the usual choice,
//     reads as an abort.
//
// The module never fails an RPC with ENETUNREACH; sendmsg returns it
// (or EHOSTUNREACH) when the kernel has no route to a new peer
// (homa_peer_get looks the route up as it creates the peer).
//
// These map to the contract's errors as the engine reports the same
// conditions: ENOTCONN and EPROTONOSUPPORT to ErrNoListener (the engine
// takes ICMP port and protocol unreachable alike as no listener),
// EHOSTUNREACH and ENETUNREACH to ErrHostUnreachable, ETIMEDOUT to
// ErrPeerTimeout, ECANCELED to ErrAborted, ESHUTDOWN to ErrClosed. The
// errno stays in the error's chain (errors.Is and errors.As find it).

// rpcError maps the errno of a failed client RPC to the error of package
// homa that means the same, keeping the errno.
func rpcError(err error) error {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return err
	}
	if cause := rpcCause(errno); cause != nil {
		return &errnoError{cause: cause, errno: errno}
	}
	return fmt.Errorf("khoma: RPC failed: %w", errno)
}

// rpcCause is the contract's error that a client RPC's errno means,
// or nil.
func rpcCause(errno syscall.Errno) error {
	switch errno {
	case syscall.ENOTCONN, syscall.EPROTONOSUPPORT:
		return contract.ErrNoListener
	case syscall.EHOSTUNREACH, syscall.ENETUNREACH:
		return contract.ErrHostUnreachable
	case syscall.ETIMEDOUT:
		return contract.ErrPeerTimeout
	case syscall.ECANCELED:
		return contract.ErrAborted
	case syscall.ESHUTDOWN:
		return contract.ErrClosed
	}
	return nil
}

// sendError maps a sendmsg failure to the contract's error that
// means the same, keeping the errno.
func sendError(err error) error {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return err
	}
	if cause := sendCause(errno); cause != nil {
		return &errnoError{cause: cause, errno: errno}
	}
	return fmt.Errorf("khoma: sendmsg: %w", errno)
}

// sendCause is the contract's error that a sendmsg errno means, or
// nil.
func sendCause(errno syscall.Errno) error {
	switch errno {
	case syscall.EAFNOSUPPORT:
		return contract.ErrBadAddress
	case syscall.ESHUTDOWN, syscall.EBADF:
		return contract.ErrClosed
	case syscall.EHOSTUNREACH, syscall.ENETUNREACH:
		return contract.ErrHostUnreachable
	}
	return nil
}

// errnoError is an errno of the module read as an error of package
// homa: errors.Is matches both the cause and the errno, errors.As finds
// the errno, and Timeout is true when the cause is a timeout (so that a
// contract.OpError holding it reports Timeout as the engine's does).
type errnoError struct {
	cause error
	errno syscall.Errno
}

func (e *errnoError) Error() string   { return e.cause.Error() + ": " + e.errno.Error() }
func (e *errnoError) Unwrap() []error { return []error{e.cause, e.errno} }

// Timeout reports whether the cause is ErrPeerTimeout.
func (e *errnoError) Timeout() bool { return errors.Is(e.cause, contract.ErrPeerTimeout) }
