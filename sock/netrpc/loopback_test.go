package netrpc_test

import (
	"bytes"
	"errors"
	"net/netip"
	"net/rpc"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/homa-go/homa/internal/testkit/socktest"
	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/netrpc"
)

// Real sockets on loopback, on every transport and backend this host
// offers: calls work, and closing both ends leaves no goroutine behind.
func TestLoopback(t *testing.T) {
	for _, tc := range socktest.Loopbacks {
		t.Run(tc.Name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			server := socktest.OpenServer(t, tc.Host, 27410, &tc.Cfg)
			srv := rpc.NewServer()
			if err := srv.Register(new(Arith)); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			wg.Go(func() { netrpc.Serve(srv, server) })

			c, err := netrpc.Dial(server.LocalAddr(), &tc.Cfg)
			if err != nil {
				t.Fatal(err)
			}
			var calls sync.WaitGroup
			for i := range 50 {
				calls.Go(func() {
					var r int
					if err := c.Call("Arith.Multiply", &Args{i, 2}, &r); err != nil || r != 2*i {
						t.Errorf("Multiply(%d, 2) = %d, %v", i, r, err)
					}
				})
			}
			calls.Wait()
			var q Quotient
			if err := c.Call("Arith.Divide", &Args{1, 0}, &q); !isServerError(err, "divide by zero") {
				t.Errorf("Divide by zero: %v", err)
			}
			in := pattern(3_000_000) // several Homa messages each way
			var out []byte
			if err := c.Call("Arith.Echo", in, &out); err != nil || !bytes.Equal(in, out) {
				t.Errorf("Echo of %d bytes: %d back, %v", len(in), len(out), err)
			}
			if err := c.Close(); err != nil {
				t.Errorf("client Close: %v", err)
			}
			if err := server.Close(); err != nil {
				t.Errorf("server Close: %v", err)
			}
			wg.Wait()
			socktest.WaitGoroutines(t, before)
		})
	}
}

// Dial refuses an address no server can have.
func TestDialBadAddress(t *testing.T) {
	for _, a := range []netip.AddrPort{{}, netip.MustParseAddrPort("127.0.0.1:0")} {
		if _, err := netrpc.Dial(a, nil); !errors.Is(err, sock.ErrBadAddress) {
			t.Errorf("Dial(%v): %v, want sock.ErrBadAddress", a, err)
		}
	}
}

// A server that is absent fails the call in the same way over UDP and
// raw IP: an error matching ErrServerUnavailable and the transport's
// cause, naming the server; the client is shut down, and a client dialed
// again once a server listens there calls it.
func TestServerUnavailable(t *testing.T) {
	for _, tc := range socktest.Loopbacks[:4] { // the engine's; the kernel's ICMP is rate limited
		t.Run(tc.Name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			probe := socktest.OpenServer(t, tc.Host, 27470, &tc.Cfg)
			addr := probe.LocalAddr()
			probe.Close() // now nobody listens at addr

			c, err := netrpc.Dial(addr, &tc.Cfg)
			if err != nil {
				t.Fatal(err)
			}
			var r int
			err = c.Call("Arith.Multiply", &Args{6, 7}, &r)
			// UDP hears of the absent port at once (ICMP); over raw IP
			// this host's engine keeps silent, so the call times out.
			cause := sock.ErrNoListener
			if tc.Cfg.Transport == sock.Raw {
				cause = sock.ErrPeerTimeout
			}
			if !errors.Is(err, netrpc.ErrServerUnavailable) || !errors.Is(err, cause) {
				t.Errorf("call to an absent server: %v, want ErrServerUnavailable and %v", err, cause)
			}
			if err == nil || !strings.Contains(err.Error(), addr.String()) {
				t.Errorf("error %q does not name the server %v", err, addr)
			}
			if err := c.Call("Arith.Multiply", &Args{6, 7}, &r); !errors.Is(err, rpc.ErrShutdown) {
				t.Errorf("second call: %v, want rpc.ErrShutdown", err)
			}
			c.Close()

			server, err := sock.Open(addr, &tc.Cfg)
			if err != nil {
				t.Fatal(err)
			}
			srv := rpc.NewServer()
			if err := srv.Register(new(Arith)); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			wg.Go(func() { netrpc.Serve(srv, server) })
			c, err = netrpc.Dial(addr, &tc.Cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Call("Arith.Multiply", &Args{6, 7}, &r); err != nil || r != 42 {
				t.Errorf("call once the server is back = %d, %v", r, err)
			}
			c.Close()
			server.Close()
			wg.Wait()
			socktest.WaitGoroutines(t, before)
		})
	}
}
