package homagrpc_test

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/internal/testkit/socktest"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/homa-go/homa/sock/homagrpc"
)

// streamService implements the streaming methods of grpc.testing's
// TestService as the interop tests describe them, written as for
// grpc-go. It echoes the interop metadata keys into the header and
// trailer, and records what its handlers saw.
type streamService struct {
	testpb.UnimplementedTestServiceServer

	mu       sync.Mutex
	sent     int   // messages the handlers' SendMsg took
	ctxErr   error // the context's error when a handler returned
	cause    error
	entered  chan struct{} // closed by a handler that blocks (see block)
	returned chan struct{} // closed when it returns
	block    bool          // handlers wait for their context to end
}

// blocking returns a service whose handlers wait for their context.
func blocking() *streamService {
	return &streamService{block: true, entered: make(chan struct{}), returned: make(chan struct{})}
}

func (s *streamService) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return nil, s.waitIfBlocking(ctx)
}

func (s *streamService) echoMD(ctx context.Context, ss grpc.ServerStream) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(echoInitial); len(v) > 0 {
		_ = ss.SetHeader(metadata.Pairs(echoInitial, v[0]))
	}
	if v := md.Get(echoTrailing); len(v) > 0 {
		ss.SetTrailer(metadata.Pairs(echoTrailing, v[0]))
	}
}

// waitIfBlocking blocks until ctx ends when the service is set to, and
// records how the handler's context ended.
func (s *streamService) waitIfBlocking(ctx context.Context) error {
	s.mu.Lock()
	block, entered := s.block, s.entered
	s.mu.Unlock()
	if !block {
		return nil
	}
	close(entered)
	<-ctx.Done()
	s.mu.Lock()
	s.ctxErr, s.cause = ctx.Err(), context.Cause(ctx)
	s.mu.Unlock()
	close(s.returned)
	return ctx.Err()
}

func (s *streamService) send(ss grpc.ServerStream, size int32, typ testpb.PayloadType) error {
	err := ss.SendMsg(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Type: typ, Body: make([]byte, size)}})
	if err == nil {
		s.mu.Lock()
		s.sent++
		s.mu.Unlock()
	}
	return err
}

func (s *streamService) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, ss testpb.TestService_StreamingOutputCallServer) error {
	s.echoMD(ss.Context(), ss)
	if err := s.waitIfBlocking(ss.Context()); err != nil {
		return err
	}
	for _, p := range req.GetResponseParameters() {
		time.Sleep(time.Duration(p.GetIntervalUs()) * time.Microsecond)
		if err := s.send(ss, p.GetSize(), req.GetResponseType()); err != nil {
			return err
		}
	}
	if rs := req.GetResponseStatus(); rs != nil && rs.Code != 0 {
		return status.Error(codes.Code(rs.Code), rs.Message)
	}
	return nil
}

func (s *streamService) StreamingInputCall(ss testpb.TestService_StreamingInputCallServer) error {
	s.echoMD(ss.Context(), ss)
	total := 0
	for {
		req, err := ss.Recv()
		if err == io.EOF {
			return ss.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: int32(total)})
		}
		if err != nil {
			return err
		}
		total += len(req.GetPayload().GetBody())
	}
}

func (s *streamService) FullDuplexCall(ss testpb.TestService_FullDuplexCallServer) error {
	s.echoMD(ss.Context(), ss)
	if err := s.waitIfBlocking(ss.Context()); err != nil {
		return err
	}
	for {
		req, err := ss.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if rs := req.GetResponseStatus(); rs != nil && rs.Code != 0 {
			return status.Error(codes.Code(rs.Code), rs.Message)
		}
		for _, p := range req.GetResponseParameters() {
			if err := s.send(ss, p.GetSize(), req.GetResponseType()); err != nil {
				return err
			}
		}
	}
}

// HalfDuplexCall reads nothing: it sends one response of each size
// asked in its first request... never; it waits for its context, so
// that a client's messages pile up against its window.
func (s *streamService) HalfDuplexCall(ss testpb.TestService_HalfDuplexCallServer) error {
	<-ss.Context().Done()
	return ss.Context().Err()
}

func (s *streamService) sentCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent
}

func newStreamWorld(t *testing.T, svc *streamService, opts ...homagrpc.ServerOption) *memWorld {
	return serveMem(t, memnet.Config{}, func(r grpc.ServiceRegistrar) { testpb.RegisterTestServiceServer(r, svc) }, opts...)
}

func params(sizes ...int32) []*testpb.ResponseParameters {
	ps := make([]*testpb.ResponseParameters, len(sizes))
	for i, n := range sizes {
		ps[i] = &testpb.ResponseParameters{Size: n}
	}
	return ps
}

// A server stream delivers its messages in order, with the header and
// trailer metadata, and ends with io.EOF; a message larger than one
// Homa message goes in pieces.
func TestServerStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newStreamWorld(t, &streamService{})
		defer w.close(t)
		c := w.client(t)
		var sizes []int32
		for i := range 200 {
			sizes = append(sizes, int32(i*97))
		}
		sizes = append(sizes, 1_500_000, 3)
		ctx := metadata.AppendToOutgoingContext(context.Background(), echoInitial, "hi", echoTrailing, "\x00\x01")
		st, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{ResponseParameters: params(sizes...)})
		if err != nil {
			t.Fatalf("StreamingOutputCall: %v", err)
		}
		hdr, err := st.Header()
		if err != nil || hdr.Get(echoInitial)[0] != "hi" {
			t.Errorf("Header: %v, %v", hdr, err)
		}
		for i, n := range sizes {
			resp, err := st.Recv()
			if err != nil {
				t.Fatalf("Recv %d: %v", i, err)
			}
			if got := len(resp.GetPayload().GetBody()); got != int(n) {
				t.Fatalf("Recv %d: %d bytes, want %d", i, got, n)
			}
		}
		if _, err := st.Recv(); err != io.EOF {
			t.Fatalf("Recv after the last: %v, want io.EOF", err)
		}
		if got := st.Trailer().Get(echoTrailing); len(got) != 1 || got[0] != "\x00\x01" {
			t.Errorf("Trailer: %v", st.Trailer())
		}
	})
}

// A client stream carries its messages to the handler, which answers
// once after the half-close.
func TestClientStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newStreamWorld(t, &streamService{})
		defer w.close(t)
		c := w.client(t)
		st, err := c.StreamingInputCall(context.Background())
		if err != nil {
			t.Fatalf("StreamingInputCall: %v", err)
		}
		want := 0
		for i := range 300 {
			n := i * 31
			want += n
			if err := st.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: make([]byte, n)}}); err != nil {
				t.Fatalf("Send %d: %v", i, err)
			}
		}
		resp, err := st.CloseAndRecv()
		if err != nil {
			t.Fatalf("CloseAndRecv: %v", err)
		}
		if got := int(resp.GetAggregatedPayloadSize()); got != want {
			t.Errorf("aggregated %d bytes, want %d", got, want)
		}
	})
}

// A bidirectional stream answers each message in turn, in order, ends
// with io.EOF after the client's half-close, and carries a failing
// status with its code and message after the messages sent before it.
func TestBidiStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newStreamWorld(t, &streamService{})
		defer w.close(t)
		c := w.client(t)
		ctx := context.Background()
		st, err := c.FullDuplexCall(ctx)
		if err != nil {
			t.Fatalf("FullDuplexCall: %v", err)
		}
		for i := range 100 {
			if err := st.Send(&testpb.StreamingOutputCallRequest{ResponseParameters: params(int32(i), int32(i+1))}); err != nil {
				t.Fatalf("Send %d: %v", i, err)
			}
			for j := range 2 {
				resp, err := st.Recv()
				if err != nil || len(resp.GetPayload().GetBody()) != i+j {
					t.Fatalf("Recv %d.%d: %d bytes, %v", i, j, len(resp.GetPayload().GetBody()), err)
				}
			}
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != io.EOF {
			t.Fatalf("Recv after CloseSend: %v, want io.EOF", err)
		}

		st, err = c.FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = st.Send(&testpb.StreamingOutputCallRequest{ResponseParameters: params(5)})
		_ = st.Send(&testpb.StreamingOutputCallRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(codes.FailedPrecondition), Message: "no"}})
		if resp, err := st.Recv(); err != nil || len(resp.GetPayload().GetBody()) != 5 {
			t.Fatalf("Recv before the failure: %v", err)
		}
		_, err = st.Recv()
		if s := status.Convert(err); s.Code() != codes.FailedPrecondition || s.Message() != "no" {
			t.Errorf("Recv: %v, want FailedPrecondition \"no\"", err)
		}
		if err := st.Send(&testpb.StreamingOutputCallRequest{}); err != io.EOF {
			t.Errorf("Send after the end: %v, want io.EOF", err)
		}
	})
}

// A reader that stops bounds what its peer's sender holds: each side
// queues at most its window (and one message) for a reader that does
// not read, and the sender's SendMsg waits.
func TestStreamFlowControl(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window, size = 256 << 10, 32 << 10
		svc := &streamService{}
		w := newStreamWorld(t, svc, homagrpc.InitialWindowSize(window))
		defer w.close(t)
		c := w.client(t, homagrpc.WithInitialWindowSize(window))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()

		// Server to client: the client reads nothing.
		var sizes []int32
		for range 100 {
			sizes = append(sizes, size)
		}
		st, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{ResponseParameters: params(sizes...)})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		// The client holds its window; the server's queue holds what the
		// credit lets go plus one message.
		if got, most := svc.sentCount(), window/size+2; got > most {
			t.Errorf("the server's handler sent %d messages of %d bytes to a reader that reads nothing, want at most %d", got, size, most)
		}
		for i := range sizes {
			if _, err := st.Recv(); err != nil {
				t.Fatalf("Recv %d: %v", i, err)
			}
		}
		synctest.Wait() // the handler counts a message after SendMsg returns
		if got := svc.sentCount(); got != len(sizes) {
			t.Errorf("the handler sent %d messages once read, want %d", got, len(sizes))
		}

		// Client to server: the handler reads nothing.
		hd, err := c.HalfDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sent := make(chan int)
		go func() {
			n := 0
			for hd.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: make([]byte, size)}}) == nil {
				n++
			}
			sent <- n
		}()
		synctest.Wait()
		cancel()
		if n, most := <-sent, window/size+2+initialExtra; n > most {
			t.Errorf("the client sent %d messages of %d bytes to a handler that reads nothing, want at most %d", n, size, most)
		}
	})
}

// initialExtra allows for the messages the open frame carries on the
// initial credit before the server's window is known.
const initialExtra = 2

// A stream's deadline reaches the handler; the client sees
// DeadlineExceeded.
func TestStreamDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc := blocking()
		w := newStreamWorld(t, svc)
		defer w.close(t)
		c := w.client(t)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		st, err := c.FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = st.Recv()
		wantCode(t, "Recv", err, codes.DeadlineExceeded)
		synctest.Wait()
		svc.mu.Lock()
		defer svc.mu.Unlock()
		if !errors.Is(svc.ctxErr, context.DeadlineExceeded) {
			t.Errorf("the handler's context ended with %v, want the deadline", svc.ctxErr)
		}
	})
}

// GracefulStop lets an open stream run to its end, refusing new calls
// and streams meanwhile, and Stop cancels the handlers of open streams.
func TestStreamsAtStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newStreamWorld(t, &streamService{})
		c := w.client(t)
		ctx := context.Background()
		st, err := c.FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&testpb.StreamingOutputCallRequest{ResponseParameters: params(3)}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
		stopped := make(chan struct{})
		go func() { w.srv.GracefulStop(); close(stopped) }()
		synctest.Wait()
		select {
		case <-stopped:
			t.Fatal("GracefulStop returned while a stream was open")
		default:
		}
		_, err = c.UnaryCall(ctx, &testpb.SimpleRequest{})
		wantCode(t, "unary call while stopping", err, codes.Unavailable)
		st2, err := c.FullDuplexCall(ctx)
		if err == nil {
			_, err = st2.Recv()
		}
		wantCode(t, "new stream while stopping", err, codes.Unavailable)
		// The open stream still works, and its end lets GracefulStop end.
		if err := st.Send(&testpb.StreamingOutputCallRequest{ResponseParameters: params(4)}); err != nil {
			t.Fatal(err)
		}
		if resp, err := st.Recv(); err != nil || len(resp.GetPayload().GetBody()) != 4 {
			t.Fatalf("Recv on the open stream while stopping: %v", err)
		}
		_ = st.CloseSend()
		if _, err := st.Recv(); err != io.EOF {
			t.Fatalf("Recv at the end: %v", err)
		}
		<-stopped
		if err := <-w.served; err != nil {
			t.Errorf("Serve after GracefulStop: %v", err)
		}
		w.nw.Close()

		// Stop cancels what runs.
		svc := blocking()
		w = newStreamWorld(t, svc)
		c = w.client(t)
		st, err = c.FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = st.Recv() }()
		<-svc.entered
		w.close(t)
		<-svc.returned
		if !errors.Is(svc.ctxErr, context.Canceled) {
			t.Errorf("the handler's context at Stop: %v", svc.ctxErr)
		}
	})
}

// A client that vanishes without a word (its socket closed, no cancel
// frame) is taken as gone after four keepalive intervals without a
// frame: the handler's context ends and the stream is counted abandoned.
func TestStreamClientVanishes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc := blocking()
		w := newStreamWorld(t, svc, homagrpc.StreamKeepalive(time.Second))
		defer w.close(t)
		conn, err := socktest.OpenMem(w.nw, netip.AddrPortFrom(clientHost, 0), testConfig())
		if err != nil {
			t.Fatal(err)
		}
		s := conn
		c := testpb.NewTestServiceClient(homagrpc.NewClientConn(s, serverAddr))
		st, err := c.FullDuplexCall(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = st.Recv() }()
		<-svc.entered
		start := time.Now()
		s.Close()
		<-svc.returned
		if d := time.Since(start); d < 3*time.Second || d > 6*time.Second {
			t.Errorf("the handler ended %v after the client vanished, want about 4 keepalives (4s)", d)
		}
		if got := w.srv.Stats().Abandoned; got != 1 {
			t.Errorf("Stats().Abandoned = %d, want 1", got)
		}
	})
}

// Stream interceptors run on both sides, outermost first, and see the
// stream's messages; a header sent before any message reaches the
// client's Header at once.
func TestStreamInterceptors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var order []string
		note := func(s string) {
			mu.Lock()
			order = append(order, s)
			mu.Unlock()
		}
		srvInt := func(name string) grpc.StreamServerInterceptor {
			return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
				note(name + " " + info.FullMethod)
				if name == "s1" {
					if err := ss.SendHeader(metadata.Pairs("early", "yes")); err != nil {
						return err
					}
				}
				return handler(srv, ss)
			}
		}
		cliInt := func(name string) grpc.StreamClientInterceptor {
			return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				note(name)
				return streamer(ctx, desc, cc, method, opts...)
			}
		}
		svc := blocking()
		w := newStreamWorld(t, svc, homagrpc.ChainStreamInterceptor(srvInt("s1"), srvInt("s2")))
		defer w.close(t)
		c := w.client(t, homagrpc.WithChainStreamInterceptor(cliInt("c1"), cliInt("c2")))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		st, err := c.FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		hdr, err := st.Header() // the handler blocks: only SendHeader can bring it
		if err != nil || len(hdr.Get("early")) != 1 {
			t.Errorf("Header: %v, %v", hdr, err)
		}
		<-svc.entered
		mu.Lock()
		defer mu.Unlock()
		m := testpb.TestService_FullDuplexCall_FullMethodName
		if want := []string{"c1", "c2", "s1 " + m, "s2 " + m}; !slices.Equal(order, want) {
			t.Errorf("interceptors ran %v, want %v", order, want)
		}
	})
}

// Many server streams of one client, their messages carried by the
// answers to pull sets, over a network that loses, duplicates and
// reorders packets: every stream gets all its messages, in order.
func TestServerStreamsPulledOverLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := serveMem(t, memnet.Config{Seed: 11, Loss: 0.05, Duplicate: 0.02, Reorder: 0.02}, func(r grpc.ServiceRegistrar) {
			testpb.RegisterTestServiceServer(r, &streamService{})
		})
		defer w.close(t)
		c := w.client(t)
		const streams, msgs = 20, 30
		var wg sync.WaitGroup
		for s := range streams {
			wg.Go(func() {
				// A message a millisecond: each goes in an answer to a
				// pull set, with those of other streams ready then.
				var sizes []int32
				ps := make([]*testpb.ResponseParameters, msgs)
				for i := range ps {
					sizes = append(sizes, int32(s*100+i))
					ps[i] = &testpb.ResponseParameters{Size: sizes[i], IntervalUs: 1000}
				}
				st, err := c.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{ResponseParameters: ps})
				if err != nil {
					t.Errorf("stream %d: %v", s, err)
					return
				}
				for i, n := range sizes {
					resp, err := st.Recv()
					if err != nil || len(resp.GetPayload().GetBody()) != int(n) {
						t.Errorf("stream %d, message %d: %v", s, i, err)
						return
					}
				}
				if _, err := st.Recv(); err != io.EOF {
					t.Errorf("stream %d ends with %v, want io.EOF", s, err)
				}
			})
		}
		wg.Wait()
		if st := w.srv.Stats(); st.PullSets < msgs/2 || st.Pulls < 2*streams {
			t.Errorf("%d pull sets listing %d streams, want the messages carried by their answers", st.PullSets, st.Pulls)
		}
	})
}
