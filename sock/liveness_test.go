package sock_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/homa-go/homa/sock"
)

// TestDeadPortThenSlowServer: a call to a port where nothing listens
// fails, and says why (ErrNoListener where the network reports it: over
// UDP the kernel answers ICMP port unreachable; over raw IP on this host
// another Homa socket is open, so nothing answers and the call times out
// with ErrPeerTimeout). The next call, to a live server on the same host
// whose handler takes 50 ms (ten RESEND delays), succeeds: silence on
// the dead port is not held against the live one, and a server still
// working is not dead. Errors carry the RPC's context.
func TestDeadPortThenSlowServer(t *testing.T) {
	for i, tc := range transports {
		t.Run(tc.name, func(t *testing.T) {
			addr := netip.MustParseAddr(tc.addr)
			port := uint16(23000 + i)
			server, err := sock.Open(netip.AddrPortFrom(addr, port), &sock.Config{Transport: tc.tr})
			if errors.Is(err, sock.ErrPermission) {
				t.Skipf("skipping %v transport: %v", tc.tr, err)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer server.Close()
			client, err := sock.Open(netip.AddrPortFrom(addr, 0), &sock.Config{Transport: tc.tr})
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			go func() {
				for {
					req, err := server.Recv(context.Background(), sock.Any)
					if err != nil {
						return
					}
					time.Sleep(50 * time.Millisecond) // a slow handler
					server.Reply(req, req.Data)
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			dead := netip.AddrPortFrom(addr, uint16(23500+i)) // nobody listens there
			_, err = client.Call(ctx, dead, []byte("anyone?"))
			var op *sock.OpError
			switch {
			case !errors.As(err, &op) || op.Peer != dead || op.ID == 0:
				t.Fatalf("call to a dead port: %v, want an *OpError naming the RPC and %v", err, dead)
			case tc.tr == sock.UDP && !errors.Is(err, sock.ErrNoListener):
				t.Fatalf("UDP call to a dead port: %v, want ErrNoListener", err)
			case tc.tr == sock.Raw && (!errors.Is(err, sock.ErrPeerTimeout) || !op.Timeout()):
				t.Fatalf("raw call to a dead port: %v, want ErrPeerTimeout, a timeout", err)
			}
			m, err := client.Call(ctx, server.LocalAddr(), []byte("slow"))
			if err != nil || string(m.Data) != "slow" {
				t.Fatalf("call to a live server with a 50 ms handler after a dead port: %v", err)
			}
		})
	}
}
