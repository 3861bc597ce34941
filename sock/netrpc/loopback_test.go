package netrpc_test

import (
	"errors"
	"fmt"
	"net/netip"
	"net/rpc"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/netrpc"
)

// openServer opens a server socket on host at the first free port from
// base, or skips the test when the configuration needs what the process
// or the kernel lacks.
func openServer(tb testing.TB, host string, base uint16, cfg *sock.Config) *sock.Socket {
	tb.Helper()
	s, err := openFree(host, base, cfg)
	switch {
	case errors.Is(err, sock.ErrPermission):
		tb.Skipf("skipping: raw Homa sockets need CAP_NET_RAW (run as root): %v", err)
	case errors.Is(err, sock.ErrNoKernelHoma):
		tb.Skipf("skipping: the kernel has no Homa module: %v", err)
	case err != nil:
		tb.Fatal(err)
	}
	return s
}

// openFree opens a server socket on host at the first free port of the
// hundred from base.
func openFree(host string, base uint16, cfg *sock.Config) (*sock.Socket, error) {
	addr := netip.MustParseAddr(host)
	for port := base; port < base+100; port++ {
		s, err := sock.Open(netip.AddrPortFrom(addr, port), cfg)
		if !errors.Is(err, sock.ErrPortInUse) {
			return s, err
		}
	}
	return nil, fmt.Errorf("no free Homa port in %d..%d: %w", base, base+99, sock.ErrPortInUse)
}

// waitGoroutines fails the test unless the number of goroutines falls to
// at most n within a few seconds.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after Close, want at most %d:\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Real sockets on loopback, on every transport and backend this host
// offers: calls work, and closing both ends leaves no goroutine behind.
func TestLoopback(t *testing.T) {
	for _, tc := range []struct {
		name string
		host string
		cfg  sock.Config
	}{
		{"udp4", "127.0.0.1", sock.Config{Transport: sock.UDP}},
		{"udp6", "::1", sock.Config{Transport: sock.UDP}},
		{"raw4", "127.0.0.1", sock.Config{Transport: sock.Raw}},
		{"raw6", "::1", sock.Config{Transport: sock.Raw}},
		{"kernel", "127.0.0.1", sock.Config{Backend: sock.Kernel}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			server := openServer(t, tc.host, 27410, &tc.cfg)
			srv := rpc.NewServer()
			if err := srv.Register(new(Arith)); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			wg.Go(func() { netrpc.Serve(srv, server) })

			c, err := netrpc.Dial(server.LocalAddr(), &tc.cfg)
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
			waitGoroutines(t, before)
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
