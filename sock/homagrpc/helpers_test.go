package homagrpc_test

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/homa-go/homa/internal/testkit/socktest"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/homagrpc"
)

// testConfig is the socket configuration of every test in this package.
// Polling is off: a spinning poller would keep the fake clock of a
// synctest bubble from advancing.
func testConfig() *sock.Config {
	return &sock.Config{PollDuration: -1}
}

// Metadata keys the test service echoes, as the gRPC interop tests
// define them.
const (
	echoInitial  = "x-grpc-test-echo-initial"
	echoTrailing = "x-grpc-test-echo-trailing-bin"
)

// testService implements the generated grpc.testing.TestService, written
// as for grpc-go: nothing in it knows about Homa. UnaryCall answers with
// ResponseSize bytes, fails with ResponseStatus when that is set, echoes
// the interop metadata keys into the header and trailer, and first waits
// for delay (or its context).
type testService struct {
	testpb.UnimplementedTestServiceServer

	delay time.Duration
	gate  chan struct{} // when set, UnaryCall waits for it to close (see setGate)

	mu       sync.Mutex
	running  int // UnaryCalls in progress
	peak     int // the most at once
	lastMD   metadata.MD
	lastDL   time.Time
	hasDL    bool
	lastErr  error // the context's error when UnaryCall returned
	lastMeth string
}

func (s *testService) EmptyCall(ctx context.Context, _ *testpb.Empty) (*testpb.Empty, error) {
	return &testpb.Empty{}, nil
}

func (s *testService) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	dl, hasDL := ctx.Deadline()
	method, _ := grpc.Method(ctx)
	s.mu.Lock()
	s.running++
	s.peak = max(s.peak, s.running)
	s.lastMD, s.lastDL, s.hasDL, s.lastMeth = md, dl, hasDL, method
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running--
		s.lastErr = ctx.Err()
		s.mu.Unlock()
	}()

	if v := md.Get(echoInitial); len(v) > 0 {
		if err := grpc.SetHeader(ctx, metadata.Pairs(echoInitial, v[0])); err != nil {
			return nil, err
		}
	}
	if v := md.Get(echoTrailing); len(v) > 0 {
		if err := grpc.SetTrailer(ctx, metadata.Pairs(echoTrailing, v[0])); err != nil {
			return nil, err
		}
	}
	if gate := s.gateNow(); gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if s.delay > 0 {
		t := time.NewTimer(s.delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if rs := req.GetResponseStatus(); rs != nil && rs.Code != 0 {
		return nil, status.Error(codes.Code(rs.Code), rs.Message)
	}
	return &testpb.SimpleResponse{Payload: &testpb.Payload{Type: req.GetResponseType(), Body: make([]byte, req.GetResponseSize())}}, nil
}

var (
	serverAddr = netip.MustParseAddrPort("10.0.0.1:4000")
	clientHost = netip.MustParseAddr("10.0.0.2")
)

// memWorld is a gRPC server on an in-memory network.
type memWorld struct {
	nw     *memnet.Network
	srv    *homagrpc.Server
	svc    *testService
	served chan error // Serve's result
}

// newMemWorld serves svc on an in-memory network; close stops it.
func newMemWorld(t *testing.T, mc memnet.Config, svc *testService, opts ...homagrpc.ServerOption) *memWorld {
	t.Helper()
	w := serveMem(t, mc, func(r grpc.ServiceRegistrar) { testpb.RegisterTestServiceServer(r, svc) }, opts...)
	w.svc = svc
	return w
}

// serveMem serves what register registers on an in-memory network;
// close stops it.
func serveMem(t *testing.T, mc memnet.Config, register func(grpc.ServiceRegistrar), opts ...homagrpc.ServerOption) *memWorld {
	t.Helper()
	w := &memWorld{nw: memnet.New(mc), served: make(chan error, 1)}
	conn, err := socktest.OpenMem(w.nw, serverAddr, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	w.srv = homagrpc.NewServer(opts...)
	register(w.srv)
	s := conn
	go func() { w.served <- w.srv.Serve(s) }()
	return w
}

// dial returns a ClientConn to dst from a socket of its own; the socket
// is closed at the end of the test.
func (w *memWorld) dial(t *testing.T, dst netip.AddrPort, opts ...homagrpc.DialOption) *homagrpc.ClientConn {
	t.Helper()
	return homagrpc.NewClientConn(clientSocket(t, w.nw), dst, opts...)
}

// clientSocket opens a socket on nw at the client's host, closed at the
// end of the test.
func clientSocket(t *testing.T, nw *memnet.Network) *sock.Socket {
	t.Helper()
	return socketAt(t, nw, clientHost)
}

// socketAt opens a socket on nw at host, closed at the end of the test.
func socketAt(t *testing.T, nw *memnet.Network, host netip.Addr) *sock.Socket {
	t.Helper()
	s, err := socktest.OpenMem(nw, netip.AddrPortFrom(host, 0), testConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newNetwork is an in-memory network, closed at the end of the test
// (after what the test serves on it has stopped).
func newNetwork(t *testing.T) *memnet.Network {
	nw := memnet.New(memnet.Config{})
	t.Cleanup(func() { nw.Close() })
	return nw
}

// serveAt serves svc at addr on nw until the test ends, or until Stop.
func serveAt(t *testing.T, nw *memnet.Network, addr netip.AddrPort, svc testpb.TestServiceServer) *homagrpc.Server {
	t.Helper()
	s, err := socktest.OpenMem(nw, addr, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	srv := homagrpc.NewServer()
	testpb.RegisterTestServiceServer(srv, svc)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(s) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve at %v after Stop: %v", addr, err)
		}
	})
	return srv
}

// client returns a generated TestService client of the server.
func (w *memWorld) client(t *testing.T, opts ...homagrpc.DialOption) testpb.TestServiceClient {
	return testpb.NewTestServiceClient(w.dial(t, serverAddr, opts...))
}

// close stops the server and checks what Serve returned.
func (w *memWorld) close(t *testing.T) {
	t.Helper()
	w.srv.Stop()
	if err := <-w.served; err != nil {
		t.Errorf("Serve after Stop: %v", err)
	}
	w.nw.Close()
}

// wantCode fails the test unless err has status code c.
func wantCode(t *testing.T, what string, err error, c codes.Code) {
	t.Helper()
	if got := status.Code(err); got != c {
		t.Errorf("%s: %v (code %v), want code %v", what, err, got, c)
	}
}

// gateNow is the gate UnaryCall waits at, if any.
func (s *testService) gateNow() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gate
}

// setGate makes UnaryCall wait for g to close (nil: no waiting).
func (s *testService) setGate(g chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gate = g
}

// serveTCP serves gs on a TCP loopback port until the test ends and
// returns a grpc-go client of it.
func serveTCP(t *testing.T, gs *grpc.Server) *grpc.ClientConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = gs.Serve(ln) })
	t.Cleanup(func() { gs.Stop(); wg.Wait() })
	cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}
