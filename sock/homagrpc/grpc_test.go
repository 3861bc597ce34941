package homagrpc_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/homagrpc"
)

// The generated client and server work unchanged: empty calls, and
// payloads of every size up to what one Homa message holds, both ways.
func TestUnaryRoundTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t, memnet.Config{}, &testService{})
		defer w.close(t)
		c := w.client(t)
		ctx := context.Background()
		if _, err := c.EmptyCall(ctx, &testpb.Empty{}); err != nil {
			t.Fatalf("EmptyCall: %v", err)
		}
		for _, n := range []int{0, 1, 100, 1400, 40_000, 200_000, 999_000} {
			body := bytes.Repeat([]byte{byte(n)}, n)
			resp, err := c.UnaryCall(ctx, &testpb.SimpleRequest{
				ResponseType: testpb.PayloadType_COMPRESSABLE,
				ResponseSize: int32(n),
				Payload:      &testpb.Payload{Body: body},
			})
			if err != nil {
				t.Fatalf("UnaryCall of %d bytes: %v", n, err)
			}
			if got := len(resp.GetPayload().GetBody()); got != n || resp.GetPayload().GetType() != testpb.PayloadType_COMPRESSABLE {
				t.Errorf("UnaryCall of %d bytes: %d bytes of type %v back", n, got, resp.GetPayload().GetType())
			}
		}
		if got := w.svc.lastMeth; got != testpb.TestService_UnaryCall_FullMethodName {
			t.Errorf("grpc.Method in the handler = %q", got)
		}
	})
}

// Many calls at once from several clients each get their own response.
func TestConcurrentCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t, memnet.Config{}, &testService{})
		defer w.close(t)
		var wg sync.WaitGroup
		for range 3 {
			c := w.client(t)
			for i := range 100 {
				wg.Go(func() {
					resp, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{ResponseSize: int32(i)})
					if err != nil || len(resp.GetPayload().GetBody()) != i {
						t.Errorf("UnaryCall(%d): %d bytes, %v", i, len(resp.GetPayload().GetBody()), err)
					}
				})
			}
		}
		wg.Wait()
		if got := w.srv.Stats().Calls; got != 300 {
			t.Errorf("Stats().Calls = %d, want 300", got)
		}
	})
}

// Request metadata reaches the handler's incoming context; header and
// trailer metadata come back through grpc.Header and grpc.Trailer, binary
// values and repeated keys included.
func TestMetadata(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t, memnet.Config{}, &testService{})
		defer w.close(t)
		c := w.client(t)
		bin := string([]byte{0, 1, 2, 0xff, '\n'})
		ctx := metadata.AppendToOutgoingContext(context.Background(),
			echoInitial, "hello",
			echoTrailing, bin,
			"x-multi", "one", "x-multi", "two",
		)
		var header, trailer metadata.MD
		if _, err := c.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
			t.Fatal(err)
		}
		if got := header.Get(echoInitial); !slices.Equal(got, []string{"hello"}) {
			t.Errorf("header %s = %q, want [hello]", echoInitial, got)
		}
		if got := trailer.Get(echoTrailing); !slices.Equal(got, []string{bin}) {
			t.Errorf("trailer %s = %q, want [%q]", echoTrailing, got, bin)
		}
		if got := w.svc.lastMD.Get("x-multi"); !slices.Equal(got, []string{"one", "two"}) {
			t.Errorf("incoming x-multi = %q, want [one two]", got)
		}

		// A failed call still returns its header and trailer.
		header, trailer = nil, nil
		_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(codes.Aborted), Message: "no"}},
			grpc.Header(&header), grpc.Trailer(&trailer))
		wantCode(t, "UnaryCall with status Aborted", err, codes.Aborted)
		if header.Get(echoInitial) == nil || trailer.Get(echoTrailing) == nil {
			t.Errorf("failed call: header %v, trailer %v, want the echoes", header, trailer)
		}

		// Metadata that breaks gRPC's rules never leaves the client.
		bad := metadata.AppendToOutgoingContext(context.Background(), "x-bad", "line\nbreak")
		_, err = c.UnaryCall(bad, &testpb.SimpleRequest{})
		wantCode(t, "non-printable metadata value", err, codes.Internal)
	})
}

// The deadline travels as the time remaining, and the handler's context
// carries it: exactly the caller's when the network takes no time, later
// by the one-way delay when it does.
func TestDeadlinePropagation(t *testing.T) {
	for _, delay := range []time.Duration{0, 300 * time.Microsecond} {
		synctest.Test(t, func(t *testing.T) {
			w := newMemWorld(t, memnet.Config{Delay: delay}, &testService{})
			defer w.close(t)
			c := w.client(t)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			want, _ := ctx.Deadline()
			if _, err := c.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
				t.Fatal(err)
			}
			if !w.svc.hasDL {
				t.Fatal("the handler's context has no deadline")
			}
			if skew := w.svc.lastDL.Sub(want); skew < delay || skew > 2*delay {
				t.Errorf("delay %v: handler's deadline is %v after the caller's, want %v..%v", delay, skew, delay, 2*delay)
			}
			// Without a deadline the handler sees none.
			if _, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{}); err != nil {
				t.Fatal(err)
			}
			if w.svc.hasDL {
				t.Errorf("the handler saw deadline %v for a call without one", w.svc.lastDL)
			}
		})
	}
}

// A handler slower than the deadline: the caller gets DeadlineExceeded
// at its deadline (matching context.DeadlineExceeded too), and the
// handler's context ends then as well.
func TestDeadlineExceeded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t, memnet.Config{}, &testService{delay: 5 * time.Second})
		defer w.close(t)
		c := w.client(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{})
		wantCode(t, "slow handler", err, codes.DeadlineExceeded)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%v does not match context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d != time.Second {
			t.Errorf("call returned after %v, want 1s", d)
		}
		synctest.Wait()
		w.svc.mu.Lock()
		defer w.svc.mu.Unlock()
		if w.svc.running != 0 || !errors.Is(w.svc.lastErr, context.DeadlineExceeded) {
			t.Errorf("handler: %d running, context error %v, want it ended by its deadline", w.svc.running, w.svc.lastErr)
		}
		// A deadline already past fails at once, without a request.
		past, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel2()
		calls := w.srv.Stats().Calls
		_, err = c.UnaryCall(past, &testpb.SimpleRequest{})
		wantCode(t, "deadline in the past", err, codes.DeadlineExceeded)
		if w.srv.Stats().Calls != calls {
			t.Error("a call whose deadline had passed reached the server")
		}
	})
}

// Canceling the caller's context ends the call with Canceled.
func TestCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t, memnet.Config{}, &testService{delay: time.Hour})
		defer w.close(t)
		c := w.client(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() {
			_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{})
			done <- err
		}()
		synctest.Wait()
		cancel()
		err := <-done
		wantCode(t, "canceled call", err, codes.Canceled)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%v does not match context.Canceled", err)
		}
	})
}

// Status codes, messages and details survive the trip.
func TestStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		detail := &testpb.EchoStatus{Code: 42, Message: "detail"}
		failing := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if info.FullMethod == testpb.TestService_EmptyCall_FullMethodName {
				st, err := status.New(codes.FailedPrecondition, "with details").WithDetails(detail)
				if err != nil {
					return nil, err
				}
				return nil, st.Err()
			}
			return h(ctx, req)
		}
		w := newMemWorld(t, memnet.Config{}, &testService{}, homagrpc.UnaryInterceptor(failing))
		defer w.close(t)
		c := w.client(t)
		for code := codes.Canceled; code <= codes.Unauthenticated; code++ {
			_, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(code), Message: "msg " + code.String()}})
			st, ok := status.FromError(err)
			if !ok || st.Code() != code || st.Message() != "msg "+code.String() {
				t.Errorf("status %v: got %v", code, err)
			}
		}
		_, err := c.EmptyCall(context.Background(), &testpb.Empty{})
		st := status.Convert(err)
		if st.Code() != codes.FailedPrecondition || st.Message() != "with details" || len(st.Details()) != 1 {
			t.Fatalf("status with details: %v, details %v", err, st.Details())
		}
		if got, ok := st.Details()[0].(*testpb.EchoStatus); !ok || got.Code != 42 || got.Message != "detail" {
			t.Errorf("detail = %v, want %v", st.Details()[0], detail)
		}
	})
}

// Unknown services and methods, methods the service leaves
// unimplemented, and streaming methods called as unary ones all give
// Unimplemented.
func TestUnimplemented(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t, memnet.Config{}, &testService{})
		defer w.close(t)
		cc := w.dial(t, serverAddr)
		c := testpb.NewTestServiceClient(cc)
		ctx := context.Background()
		for _, m := range []string{"/no.Such/Method", "/grpc.testing.TestService/NoSuchMethod"} {
			err := cc.Invoke(ctx, m, &testpb.Empty{}, &testpb.Empty{})
			wantCode(t, m, err, codes.Unimplemented)
		}
		_, err := c.UnimplementedCall(ctx, &testpb.Empty{})
		wantCode(t, "UnimplementedCall", err, codes.Unimplemented)

		// Streaming methods the service leaves unimplemented fail on
		// the first Recv, with the generated server's status.
		so, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
		if err != nil {
			t.Fatalf("StreamingOutputCall: %v", err)
		}
		_, err = so.Recv()
		wantCode(t, "StreamingOutputCall", err, codes.Unimplemented)
		fd, err := c.FullDuplexCall(ctx)
		if err != nil {
			t.Fatalf("FullDuplexCall: %v", err)
		}
		_, err = fd.Recv()
		wantCode(t, "FullDuplexCall", err, codes.Unimplemented)
		// A streaming method called as a unary one reaches the server,
		// which refuses it too.
		err = cc.Invoke(ctx, testpb.TestService_FullDuplexCall_FullMethodName, &testpb.Empty{}, &testpb.Empty{})
		wantCode(t, "FullDuplexCall by Invoke", err, codes.Unimplemented)
		if got := w.srv.Stats().Unimplemented; got != 3 {
			t.Errorf("Stats().Unimplemented = %d, want 3", got)
		}
	})
}

// Messages beyond grpc-go's default limit of 4 MiB, or beyond the limits
// set by options, give ResourceExhausted.
func TestMessageTooLong(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t, memnet.Config{}, &testService{})
		defer w.close(t)
		c := w.client(t)
		ctx := context.Background()
		_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: make([]byte, 5_000_000)}})
		wantCode(t, "request of 5 MB", err, codes.ResourceExhausted)
		_, err = c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 5_000_000})
		wantCode(t, "response of 5 MB", err, codes.ResourceExhausted)
		_, err = c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 200}, grpc.MaxCallRecvMsgSize(100))
		wantCode(t, "response over MaxCallRecvMsgSize", err, codes.ResourceExhausted)
		_, err = c.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: make([]byte, 200)}}, grpc.MaxCallSendMsgSize(100))
		wantCode(t, "request over MaxCallSendMsgSize", err, codes.ResourceExhausted)
		if _, err := c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 10}); err != nil {
			t.Errorf("call after the failures: %v", err)
		}
	})
}

// Server-side limits on message sizes.
func TestServerLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t, memnet.Config{}, &testService{}, homagrpc.MaxRecvMsgSize(100), homagrpc.MaxSendMsgSize(100))
		defer w.close(t)
		c := w.client(t)
		_, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{Payload: &testpb.Payload{Body: make([]byte, 200)}})
		wantCode(t, "request over MaxRecvMsgSize", err, codes.ResourceExhausted)
		_, err = c.UnaryCall(context.Background(), &testpb.SimpleRequest{ResponseSize: 200})
		wantCode(t, "response over MaxSendMsgSize", err, codes.ResourceExhausted)
	})
}

// A call to a server that does not answer gives Unavailable, matching
// sock.ErrPeerTimeout.
func TestDeadServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t, memnet.Config{}, &testService{})
		defer w.close(t)
		c := testpb.NewTestServiceClient(w.dial(t, netip.MustParseAddrPort("10.0.0.9:4000")))
		_, err := c.EmptyCall(context.Background(), &testpb.Empty{})
		wantCode(t, "call to a dead server", err, codes.Unavailable)
		if !errors.Is(err, sock.ErrPeerTimeout) {
			t.Errorf("%v does not match sock.ErrPeerTimeout", err)
		}
	})
}

// The interceptors of both sides run in the order given, around the call.
func TestInterceptors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var trace []string
		note := func(s string) { mu.Lock(); trace = append(trace, s); mu.Unlock() }
		srvI := func(name string) grpc.UnaryServerInterceptor {
			return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				note("server " + name + " " + info.FullMethod)
				return h(ctx, req)
			}
		}
		cliI := func(name string) grpc.UnaryClientInterceptor {
			return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				note("client " + name)
				return inv(metadata.AppendToOutgoingContext(ctx, "x-from", name), method, req, reply, cc, opts...)
			}
		}
		w := newMemWorld(t, memnet.Config{}, &testService{},
			homagrpc.UnaryInterceptor(srvI("a")), homagrpc.ChainUnaryInterceptor(srvI("b"), srvI("c")))
		defer w.close(t)
		c := w.client(t, homagrpc.WithUnaryInterceptor(cliI("x")), homagrpc.WithChainUnaryInterceptor(cliI("y")))
		if _, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
		m := testpb.TestService_UnaryCall_FullMethodName
		want := []string{"client x", "client y", "server a " + m, "server b " + m, "server c " + m}
		if !slices.Equal(trace, want) {
			t.Errorf("trace = %q, want %q", trace, want)
		}
		if got := w.svc.lastMD.Get("x-from"); !slices.Equal(got, []string{"x", "y"}) {
			t.Errorf("metadata added by client interceptors = %q", got)
		}
	})
}

// grpc.Peer reports the server's Homa address; the handler sees the
// client's.
func TestPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var seen peer.Peer
		record := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			p, _ := peer.FromContext(ctx)
			seen = *p
			return h(ctx, req)
		}
		w := newMemWorld(t, memnet.Config{}, &testService{}, homagrpc.UnaryInterceptor(record))
		defer w.close(t)
		c := w.client(t)
		var p peer.Peer
		if _, err := c.EmptyCall(context.Background(), &testpb.Empty{}, grpc.Peer(&p)); err != nil {
			t.Fatal(err)
		}
		if p.Addr.Network() != "homa" || p.Addr.String() != serverAddr.String() {
			t.Errorf("grpc.Peer = %v %v, want homa %v", p.Addr.Network(), p.Addr, serverAddr)
		}
		if a, ok := seen.Addr.(homagrpc.Addr); !ok || netip.AddrPort(a).Addr() != clientHost {
			t.Errorf("handler's peer = %v, want host %v", seen.Addr, clientHost)
		}
		if seen.LocalAddr.String() != serverAddr.String() {
			t.Errorf("handler's local address = %v, want %v", seen.LocalAddr, serverAddr)
		}
	})
}

// staticCreds are per-RPC credentials.
type staticCreds struct{ secure bool }

func (c staticCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer token"}, nil
}
func (c staticCreds) RequireTransportSecurity() bool { return c.secure }

// Per-RPC credentials add their metadata, unless they need transport
// security, which Homa does not have.
func TestPerRPCCredentials(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t, memnet.Config{}, &testService{})
		defer w.close(t)
		c := w.client(t)
		if _, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{}, grpc.PerRPCCredentials(staticCreds{})); err != nil {
			t.Fatal(err)
		}
		if got := w.svc.lastMD.Get("authorization"); !slices.Equal(got, []string{"Bearer token"}) {
			t.Errorf("authorization = %q", got)
		}
		_, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{}, grpc.PerRPCCredentials(staticCreds{secure: true}))
		wantCode(t, "credentials that need transport security", err, codes.Unauthenticated)
	})
}

// MaxConcurrentCalls bounds the handlers running at once; the calls
// beyond it wait and then complete.
func TestMaxConcurrentCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc := &testService{gate: make(chan struct{})}
		w := newMemWorld(t, memnet.Config{}, svc, homagrpc.MaxConcurrentCalls(3))
		defer w.close(t)
		c := w.client(t)
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() {
				if _, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{}); err != nil {
					t.Errorf("UnaryCall: %v", err)
				}
			})
		}
		// Let the network deliver what it holds (a packet may wait for
		// a timer of the current instant, which only a step of the
		// fake clock fires).
		running := 0
		for range 10 {
			synctest.Wait()
			svc.mu.Lock()
			running = svc.running
			svc.mu.Unlock()
			if running >= 3 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if running != 3 {
			t.Errorf("%d handlers running with MaxConcurrentCalls(3), want 3", running)
		}
		close(svc.gate)
		wg.Wait()
		if svc.peak > 3 {
			t.Errorf("%d handlers ran at once, more than 3", svc.peak)
		}
	})
}

// Default call options apply to every call, before the call's own; the
// OnFinish option hears how each call ended.
func TestDefaultCallOptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t, memnet.Config{}, &testService{})
		defer w.close(t)
		var finished []codes.Code
		onFinish := grpc.OnFinish(func(err error) { finished = append(finished, status.Code(err)) })
		c := w.client(t, homagrpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(50), onFinish))
		_, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{ResponseSize: 100})
		wantCode(t, "response over the default limit", err, codes.ResourceExhausted)
		if _, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{ResponseSize: 100}, grpc.MaxCallRecvMsgSize(1000)); err != nil {
			t.Errorf("call raising the limit: %v", err)
		}
		if want := []codes.Code{codes.ResourceExhausted, codes.OK}; !slices.Equal(finished, want) {
			t.Errorf("OnFinish saw %v, want %v", finished, want)
		}
	})
}
