package khoma

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"testing"

	"github.com/homa-go/homa/contract"
)

// sentinels are the contract's errors that the mappings produce.
var sentinels = []error{
	contract.ErrNoListener, contract.ErrHostUnreachable, contract.ErrPeerTimeout,
	contract.ErrAborted, contract.ErrClosed, contract.ErrBadAddress,
}

// checkMapped checks that err means want (nil: none of the sentinels)
// and nothing else, keeps errno for errors.Is and errors.As, and reports
// Timeout only for ErrPeerTimeout.
func checkMapped(t *testing.T, what string, err error, errno syscall.Errno, want error) {
	t.Helper()
	for _, s := range sentinels {
		if got := errors.Is(err, s); got != (s == want) {
			t.Errorf("%s %v: %q matches %v: %v", what, errno, err, s, got)
		}
	}
	var e syscall.Errno
	if !errors.Is(err, errno) || !errors.As(err, &e) || e != errno {
		t.Errorf("%s %v: %q lost the errno (errors.As found %v)", what, errno, err, e)
	}
	var to interface{ Timeout() bool }
	timeout := errors.As(err, &to) && to.Timeout()
	if want != nil && timeout != (want == contract.ErrPeerTimeout) {
		t.Errorf("%s %v: Timeout %v", what, errno, timeout)
	}
}

// TestRPCErrorMapping: the errno of each condition under which the module
// fails a client RPC reads as the engine's error for that condition.
func TestRPCErrorMapping(t *testing.T) {
	for _, tc := range []struct {
		errno syscall.Errno
		want  error // nil: none of the contract's errors
	}{
		{syscall.ENOTCONN, contract.ErrNoListener},        // ICMP port unreachable
		{syscall.EPROTONOSUPPORT, contract.ErrNoListener}, // ICMP protocol unreachable
		{syscall.EHOSTUNREACH, contract.ErrHostUnreachable},
		{syscall.ENETUNREACH, contract.ErrHostUnreachable},
		{syscall.ETIMEDOUT, contract.ErrPeerTimeout},
		{syscall.ECANCELED, contract.ErrAborted},
		{syscall.ESHUTDOWN, contract.ErrClosed},
		{syscall.EFAULT, nil},
		{syscall.ENOMEM, nil},
		{syscall.EINVAL, nil},
	} {
		checkMapped(t, "rpcError", rpcError(tc.errno), tc.errno, tc.want)
		// As recvmsg wraps it.
		checkMapped(t, "rpcError of a wrapped errno", rpcError(fmt.Errorf("recvmsg: %w", tc.errno)), tc.errno, tc.want)
	}
	if err := rpcError(syscall.ESHUTDOWN); !errors.Is(err, net.ErrClosed) {
		t.Errorf("ESHUTDOWN: %v does not match net.ErrClosed", err)
	}
	other := errors.New("not an errno")
	if err := rpcError(other); err != other {
		t.Errorf("rpcError(%v) = %v, want it unchanged", other, err)
	}
}

// TestSendErrorMapping: sendmsg's errnos read as the engine's errors.
func TestSendErrorMapping(t *testing.T) {
	for _, tc := range []struct {
		errno syscall.Errno
		want  error
	}{
		{syscall.EHOSTUNREACH, contract.ErrHostUnreachable}, // an unreachable route
		{syscall.ENETUNREACH, contract.ErrHostUnreachable},  // no route
		{syscall.EAFNOSUPPORT, contract.ErrBadAddress},
		{syscall.ESHUTDOWN, contract.ErrClosed},
		{syscall.EBADF, contract.ErrClosed},
		{syscall.ENOTCONN, nil},
		{syscall.ENOMEM, nil},
		{syscall.EINVAL, nil},
	} {
		checkMapped(t, "sendError", sendError(tc.errno), tc.errno, tc.want)
	}
}

// TestFailedRPCMessage: the Message of a failed client RPC carries an
// *contract.OpError that names the RPC and wraps the mapped error.
func TestFailedRPCMessage(t *testing.T) {
	peer := netip.MustParseAddrPort("127.0.0.1:99")
	for _, tc := range []struct {
		errno   syscall.Errno
		want    error
		timeout bool
	}{
		{syscall.ENOTCONN, contract.ErrNoListener, false},
		{syscall.ETIMEDOUT, contract.ErrPeerTimeout, true},
		{syscall.EHOSTUNREACH, contract.ErrHostUnreachable, false},
	} {
		s := &Socket{rargs: RecvmsgArgs{ID: 12, CompletionCookie: 3}}
		m, ok := s.message(-1, peer, tc.errno)
		if !ok || m == nil || m.ID != 12 || m.Cookie != 3 || m.Peer != peer || m.Data != nil {
			t.Fatalf("%v: message = %+v, %v", tc.errno, m, ok)
		}
		var op *contract.OpError
		if !errors.As(m.Err, &op) || op.Op != "recv" || op.ID != 12 || op.Peer != peer {
			t.Fatalf("%v: Err = %#v, want an OpError of recv rpc 12 with %v", tc.errno, m.Err, peer)
		}
		if !errors.Is(m.Err, tc.want) || !errors.Is(m.Err, tc.errno) || op.Timeout() != tc.timeout {
			t.Errorf("%v: Err = %v (Timeout %v), want %v with the errno, Timeout %v", tc.errno, m.Err, op.Timeout(), tc.want, tc.timeout)
		}
		want := fmt.Sprintf("recv from %v: %v: %v (rpc 12)", peer, tc.want, tc.errno)
		if m.Err.Error() != want {
			t.Errorf("%v: %q, want %q", tc.errno, m.Err, want)
		}
	}
}
