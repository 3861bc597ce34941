package contract

import (
	"errors"
	"net/netip"
	"testing"
)

// TestOpErrorText: an RPC's error says what happened first, and the RPC
// id, kept for debugging, last.
func TestOpErrorText(t *testing.T) {
	peer := netip.MustParseAddrPort("127.0.0.1:6199")
	for _, tt := range []struct {
		err  *OpError
		want string
	}{
		{&OpError{Op: "recv", Peer: peer, ID: 9223586087705187306, Err: ErrPeerTimeout},
			"recv from 127.0.0.1:6199: peer timed out (rpc 9223586087705187306)"},
		{&OpError{Op: "send", Peer: peer, ID: 4, Err: ErrNoListener}, "send to 127.0.0.1:6199: no Homa listener at the peer's port (rpc 4)"},
		{&OpError{Op: "reply", Peer: peer, ID: 5, Err: ErrAlreadyReplied}, "reply to 127.0.0.1:6199: request already answered (rpc 5)"},
		{&OpError{Op: "abort", Peer: peer, ID: 6, Err: ErrUnknownRPC}, "abort with 127.0.0.1:6199: unknown RPC (rpc 6)"},
		{&OpError{Op: "recv", Err: ErrClosed}, "recv: endpoint closed"},
	} {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("%q, want %q", got, tt.want)
		}
		if !errors.Is(tt.err, tt.err.Err) {
			t.Errorf("%q does not wrap its cause", tt.err)
		}
	}
}
