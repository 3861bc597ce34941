package homagrpc_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/homagrpc"
)

// openServer opens a server socket on host at the first free port from
// base, or skips when the configuration needs what the process or the
// kernel lacks.
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
			t.Fatalf("%d goroutines after Stop and Close, want at most %d:\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Real sockets on loopback, on every transport and backend this host
// offers: calls work, a call in progress when its ClientConn closes ends
// with Canceled, and Stop and Close leave no goroutine behind.
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
			s := openServer(t, tc.host, 27420, &tc.cfg)
			svc := &testService{}
			srv := homagrpc.NewServer()
			testpb.RegisterTestServiceServer(srv, svc)
			var wg sync.WaitGroup
			wg.Go(func() {
				if err := srv.Serve(s); err != nil {
					t.Errorf("Serve: %v", err)
				}
			})
			cc, err := homagrpc.Dial(s.LocalAddr(), &tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			c := testpb.NewTestServiceClient(cc)
			var calls sync.WaitGroup
			for i := range 50 {
				calls.Go(func() {
					resp, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{ResponseSize: int32(i * 1000)})
					if err != nil || len(resp.GetPayload().GetBody()) != i*1000 {
						t.Errorf("UnaryCall(%d): %v", i*1000, err)
					}
				})
			}
			calls.Wait()

			// A call the server holds, cut short by Close.
			gate := make(chan struct{})
			svc.setGate(gate)
			done := make(chan error)
			go func() {
				_, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{})
				done <- err
			}()
			for svc.runningNow() == 0 {
				time.Sleep(time.Millisecond)
			}
			if err := cc.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			wantCode(t, "call in progress at Close", <-done, codes.Canceled)
			close(gate)
			srv.Stop()
			wg.Wait()
			waitGoroutines(t, before)
		})
	}
}

// runningNow is how many UnaryCalls are in progress.
func (s *testService) runningNow() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running
}

// Dial refuses an address no server can have.
func TestDialBadAddress(t *testing.T) {
	for _, a := range []netip.AddrPort{{}, netip.MustParseAddrPort("127.0.0.1:0")} {
		if _, err := homagrpc.Dial(a, nil); !errors.Is(err, sock.ErrBadAddress) {
			t.Errorf("Dial(%v): %v, want sock.ErrBadAddress", a, err)
		}
	}
}
