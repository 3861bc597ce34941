package homagrpc_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/homa-go/homa/internal/testkit/socktest"
	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/homagrpc"
)

// With grpc.WaitForReady(true) a call made while no server answers waits
// for one (or for its context) instead of failing; without it the call
// fails with Unavailable, as before.
func TestWaitForReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := newNetwork(t)
		addrs := []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:4000"), netip.MustParseAddrPort("10.0.0.3:4000")}
		cc, err := homagrpc.NewClientConnTarget(clientSocket(t, nw), addrs)
		if err != nil {
			t.Fatal(err)
		}
		c := testpb.NewTestServiceClient(cc)
		ready := grpc.WaitForReady(true)

		_, err = c.UnaryCall(context.Background(), &testpb.SimpleRequest{})
		wantCode(t, "no server, fail fast", err, codes.Unavailable)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err = c.UnaryCall(ctx, &testpb.SimpleRequest{}, ready)
		cancel()
		wantCode(t, "no server, wait for ready", err, codes.DeadlineExceeded)
		ctx, cancel = context.WithTimeout(context.Background(), 3*time.Second)
		_, err = c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{}, ready)
		cancel()
		wantCode(t, "no server, stream, wait for ready", err, codes.DeadlineExceeded)

		// Calls that wait, and a server that comes up at the second
		// address meanwhile.
		done := make(chan error, 2)
		ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		go func() {
			_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 7}, ready)
			done <- err
		}()
		go func() {
			st, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{Size: 3}}}, ready)
			if err == nil {
				_, err = st.Recv()
			}
			done <- err
		}()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("a call waiting for ready ended before any server served: %v", err)
		default:
		}
		serveAt(t, nw, addrs[1], &streamService{})
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("call waiting for ready: %v", err)
			}
		}
	})
}

// Over UDP on loopback a port nobody holds refuses at once
// (ErrNoListener): a call fails with Unavailable, unless it waits for
// ready, and then a server that opens the port later serves it.
func TestWaitForReadyRefused(t *testing.T) {
	cfg := sock.Config{Transport: sock.UDP}
	s := socktest.OpenServer(t, "127.0.0.1", 27460, &cfg)
	addr := s.LocalAddr()
	s.Close() // refused from now on
	cc, err := homagrpc.Dial(addr, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := testpb.NewTestServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	_, err = c.UnaryCall(ctx, &testpb.SimpleRequest{})
	wantCode(t, "a refusing port, fail fast", err, codes.Unavailable)
	if !errors.Is(err, sock.ErrNoListener) {
		t.Errorf("a refusing port: %v, want ErrNoListener", err)
	}

	done := make(chan error, 1)
	go func() {
		_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 5}, grpc.WaitForReady(true))
		done <- err
	}()
	time.Sleep(100 * time.Millisecond) // some probes refused meanwhile
	select {
	case err := <-done:
		t.Fatalf("a call waiting for ready ended before any server served: %v", err)
	default:
	}
	s2, err := sock.Open(addr, &cfg)
	if err != nil {
		t.Skipf("reopening %v: %v", addr, err)
	}
	srv := homagrpc.NewServer()
	testpb.RegisterTestServiceServer(srv, &testService{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(s2) }()
	if err := <-done; err != nil {
		t.Errorf("call waiting for ready: %v", err)
	}
	srv.Stop()
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}
