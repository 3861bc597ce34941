package homagrpc_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/internal/testkit/socktest"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/mem"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/homagrpc"
)

// GracefulStop lets a call in progress finish and answer, then closes
// the socket; Serve returns nil, and later calls find nobody there.
func TestGracefulStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t, memnet.Config{}, &testService{delay: time.Second})
		defer w.nw.Close()
		c := w.client(t)
		done := make(chan error)
		go func() {
			_, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{ResponseSize: 10})
			done <- err
		}()
		synctest.Wait() // the handler is running
		start := time.Now()
		w.srv.GracefulStop()
		if d := time.Since(start); d != time.Second {
			t.Errorf("GracefulStop returned after %v, want the handler's 1s", d)
		}
		if err := <-done; err != nil {
			t.Errorf("call in progress at GracefulStop: %v", err)
		}
		if err := <-w.served; err != nil {
			t.Errorf("Serve after GracefulStop: %v", err)
		}
		_, err := c.EmptyCall(context.Background(), &testpb.Empty{})
		wantCode(t, "call after GracefulStop", err, codes.Unavailable)
		w.srv.Stop() // idempotent after GracefulStop
	})
}

// Stop cancels the handlers in progress and closes the socket; their
// callers' calls fail; Serve returns nil, and a later Serve refuses with
// grpc.ErrServerStopped and closes the socket it was given.
func TestStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t, memnet.Config{}, &testService{delay: time.Hour})
		defer w.nw.Close()
		c := w.client(t)
		done := make(chan error)
		go func() {
			_, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{})
			done <- err
		}()
		synctest.Wait()
		w.srv.Stop()
		w.srv.Stop()
		if err := <-w.served; err != nil {
			t.Errorf("Serve after Stop: %v", err)
		}
		wantCode(t, "call in progress at Stop", <-done, codes.Unavailable)
		if !errors.Is(w.svc.lastErr, context.Canceled) {
			t.Errorf("handler's context at Stop: %v, want canceled", w.svc.lastErr)
		}

		conn, err := socktest.OpenMem(w.nw, netip.AddrPortFrom(serverAddr.Addr(), 4001), testConfig())
		if err != nil {
			t.Fatal(err)
		}
		s := conn
		if err := w.srv.Serve(s); !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("Serve after Stop: %v, want grpc.ErrServerStopped", err)
		}
		if _, err := s.Send(serverAddr, []byte{1}, 0); !errors.Is(err, sock.ErrClosed) {
			t.Errorf("socket given to Serve after Stop: Send gives %v, want sock.ErrClosed", err)
		}
	})
}

// Serve returns an error wrapping sock.ErrClosed when its socket is
// closed by someone else.
func TestServeSocketClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{})
		defer nw.Close()
		conn, err := socktest.OpenMem(nw, serverAddr, testConfig())
		if err != nil {
			t.Fatal(err)
		}
		s := conn
		srv := homagrpc.NewServer()
		served := make(chan error)
		go func() { served <- srv.Serve(s) }()
		synctest.Wait()
		s.Close()
		if err := <-served; !errors.Is(err, sock.ErrClosed) {
			t.Errorf("Serve on a socket closed under it: %v, want sock.ErrClosed", err)
		}
		srv.Stop()
	})
}

// Services may be registered after Serve; bad registrations panic, as
// they are fatal in grpc-go; GetServiceInfo describes what is there.
func TestRegister(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{})
		defer nw.Close()
		conn, err := socktest.OpenMem(nw, serverAddr, testConfig())
		if err != nil {
			t.Fatal(err)
		}
		srv := homagrpc.NewServer()
		served := make(chan error)
		go func() { served <- srv.Serve(conn) }()
		cc, err := socktest.OpenMem(nw, netip.AddrPortFrom(clientHost, 0), testConfig())
		if err != nil {
			t.Fatal(err)
		}
		cs := cc
		defer cs.Close()
		c := testpb.NewTestServiceClient(homagrpc.NewClientConn(cs, serverAddr))
		_, err = c.EmptyCall(context.Background(), &testpb.Empty{})
		wantCode(t, "call before registration", err, codes.Unimplemented)
		testpb.RegisterTestServiceServer(srv, &testService{})
		if _, err := c.EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
			t.Errorf("call after registration: %v", err)
		}

		info := srv.GetServiceInfo()["grpc.testing.TestService"]
		if len(info.Methods) != 8 {
			t.Errorf("GetServiceInfo: %d methods, want 8: %v", len(info.Methods), info.Methods)
		}
		mustPanic(t, "registering twice", func() { testpb.RegisterTestServiceServer(srv, &testService{}) })
		mustPanic(t, "registering a non-implementation", func() { srv.RegisterService(&testpb.TestService_ServiceDesc, 42) })
		srv.Stop()
		<-served
	})
}

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic", what)
		}
	}()
	f()
}

// Closing a ClientConn fails its later calls with Canceled; a
// ClientConn made by NewClientConn leaves its socket open.
func TestClientConnClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t, memnet.Config{}, &testService{})
		defer w.close(t)
		conn, err := socktest.OpenMem(w.nw, netip.AddrPortFrom(clientHost, 0), testConfig())
		if err != nil {
			t.Fatal(err)
		}
		s := conn
		defer s.Close()
		cc1 := homagrpc.NewClientConn(s, serverAddr)
		cc2 := homagrpc.NewClientConn(s, serverAddr)
		for range 2 {
			if err := cc1.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		}
		_, err = testpb.NewTestServiceClient(cc1).EmptyCall(context.Background(), &testpb.Empty{})
		wantCode(t, "call after Close", err, codes.Canceled)
		if _, err := testpb.NewTestServiceClient(cc2).EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
			t.Errorf("call on a second ClientConn of the socket: %v", err)
		}
	})
}

// countingCodec is the proto codec under another name, counting its use.
type countingCodec struct {
	name string
	uses *atomic.Int64
}

func (c countingCodec) Name() string { return c.name }

func (c countingCodec) Marshal(v any) (mem.BufferSlice, error) {
	c.uses.Add(1)
	return encoding.GetCodecV2("proto").Marshal(v)
}

func (c countingCodec) Unmarshal(data mem.BufferSlice, v any) error {
	c.uses.Add(1)
	return encoding.GetCodecV2("proto").Unmarshal(data, v)
}

// countingCodecV1 is countingCodec with the older codec interface.
type countingCodecV1 struct{ countingCodec }

func (c countingCodecV1) Marshal(v any) ([]byte, error) {
	b, err := c.countingCodec.Marshal(v)
	return b.Materialize(), err
}

func (c countingCodecV1) Unmarshal(data []byte, v any) error {
	return c.countingCodec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, v)
}

var codecUses, codecV1Uses atomic.Int64

func init() {
	encoding.RegisterCodecV2(countingCodec{name: "homatest", uses: &codecUses})
	encoding.RegisterCodec(countingCodecV1{countingCodec{name: "homatestv1", uses: &codecV1Uses}})
}

// A call option may choose another codec: its name travels with the
// request and the server uses the same codec for both messages.
func TestCodecChoice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t, memnet.Config{}, &testService{})
		defer w.close(t)
		c := w.client(t)
		before := codecUses.Load()
		resp, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{ResponseSize: 5}, grpc.CallContentSubtype("homatest"))
		if err != nil || len(resp.GetPayload().GetBody()) != 5 {
			t.Fatalf("call with content subtype homatest: %v, %v", resp, err)
		}
		if n := codecUses.Load() - before; n != 4 {
			t.Errorf("codec used %d times, want 4 (two messages, each encoded and decoded)", n)
		}
		// A codec of the older interface, forced: its name is the subtype.
		before = codecV1Uses.Load()
		v1 := countingCodecV1{countingCodec{name: "homatestv1", uses: new(atomic.Int64)}}
		if _, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{ResponseSize: 5}, grpc.ForceCodec(v1)); err != nil {
			t.Fatalf("call with a forced codec: %v", err)
		}
		if n, m := v1.uses.Load(), codecV1Uses.Load()-before; n != 2 || m != 2 {
			t.Errorf("forced codec used %d times at the client and the registered one %d times at the server, want 2 and 2", n, m)
		}
		_, err = c.UnaryCall(context.Background(), &testpb.SimpleRequest{}, grpc.CallContentSubtype("nosuchcodec"))
		wantCode(t, "unregistered content subtype", err, codes.Internal)
		unknown := countingCodec{name: "unregistered", uses: new(atomic.Int64)}
		_, err = c.UnaryCall(context.Background(), &testpb.SimpleRequest{}, grpc.ForceCodecV2(unknown))
		wantCode(t, "codec the server does not have", err, codes.Internal)
		if err != nil && !strings.Contains(err.Error(), "no codec registered") {
			t.Errorf("codec the server does not have: %v", err)
		}
	})
}

// After Stop and Close, no goroutine of the server, the clients or the
// sockets is left: the synctest bubble fails the test if one is.
func TestNoGoroutinesLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t, memnet.Config{}, &testService{})
		c := w.client(t)
		for i := range 50 {
			if _, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{ResponseSize: int32(i)}); err != nil {
				t.Fatal(err)
			}
		}
		w.close(t)
	})
}
