package homagrpc_test

import (
	"context"
	"errors"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/homa-go/homa/internal/testkit/socktest"

	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/homagrpc"
)

// Real sockets on loopback, on every transport and backend this host
// offers: calls work, a call in progress when its ClientConn closes ends
// with Canceled, and Stop and Close leave no goroutine behind.
func TestLoopback(t *testing.T) {
	for _, tc := range socktest.Loopbacks {
		t.Run(tc.Name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			s := socktest.OpenServer(t, tc.Host, 27420, &tc.Cfg)
			svc := &testService{}
			srv := homagrpc.NewServer()
			testpb.RegisterTestServiceServer(srv, svc)
			var wg sync.WaitGroup
			wg.Go(func() {
				if err := srv.Serve(s); err != nil {
					t.Errorf("Serve: %v", err)
				}
			})
			cc, err := homagrpc.Dial(s.LocalAddr(), &tc.Cfg)
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
			socktest.WaitGoroutines(t, before)
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
