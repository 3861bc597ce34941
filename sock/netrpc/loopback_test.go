package netrpc_test

import (
	"errors"
	"net/netip"
	"net/rpc"
	"runtime"
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
