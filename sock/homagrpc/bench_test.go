package homagrpc_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/internal/testkit/socktest"
	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/homagrpc"
)

// benchService answers UnaryCall with ResponseSize bytes.
type benchService struct {
	testpb.UnimplementedTestServiceServer
}

func (benchService) UnaryCall(_ context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{Payload: &testpb.Payload{Body: make([]byte, req.GetResponseSize())}}, nil
}

// benchSize is the payload of the benchmark's requests and responses.
const benchSize = 100

// BenchmarkUnaryCall measures the round trip of one call at a time
// through the same protoc-generated stub (grpc.testing.TestService
// UnaryCall, 100-byte payloads each way) over Homa (UDP encapsulation,
// and raw IP when the process may, each with and without polling; see
// socktest.BenchConfigs) and over grpc-go on a TCP loopback connection, in one
// run, and reports the median and 99th percentile.
//
//	go test -run '^$' -bench UnaryCall -benchtime 20000x ./sock/homagrpc
func BenchmarkUnaryCall(b *testing.B) {
	for _, tc := range socktest.BenchConfigs {
		b.Run(tc.Name, func(b *testing.B) {
			c, stop := startHoma(b, &tc.Cfg)
			defer stop()
			benchUnary(b, c)
		})
	}
	b.Run("grpc-tcp", func(b *testing.B) {
		c, stop := startGRPC(b)
		defer stop()
		benchUnary(b, c)
	})
}

// startHoma serves benchService over Homa on loopback and returns a
// generated client of it, or skips when the transport is not available.
func startHoma(b *testing.B, cfg *sock.Config) (testpb.TestServiceClient, func()) {
	c, stop, err := tryStartHoma(cfg)
	if errors.Is(err, sock.ErrPermission) || errors.Is(err, sock.ErrNoKernelHoma) {
		b.Skipf("skipping: %v", err)
	}
	if err != nil {
		b.Fatal(err)
	}
	return c, stop
}

// tryStartHoma serves benchService over Homa on loopback and returns a
// generated client of it and the function that stops both.
func tryStartHoma(cfg *sock.Config) (testpb.TestServiceClient, func(), error) {
	s, err := socktest.OpenFree("127.0.0.1", 27520, cfg)
	if err != nil {
		return nil, nil, err
	}
	srv := homagrpc.NewServer()
	testpb.RegisterTestServiceServer(srv, benchService{})
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(s) })
	cc, err := homagrpc.Dial(s.LocalAddr(), cfg)
	if err != nil {
		srv.Stop()
		wg.Wait()
		return nil, nil, err
	}
	return testpb.NewTestServiceClient(cc), func() {
		cc.Close()
		srv.Stop()
		wg.Wait()
	}, nil
}

// startGRPC serves benchService with grpc-go on TCP loopback and returns
// a generated client of it.
func startGRPC(b *testing.B) (testpb.TestServiceClient, func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, benchService{})
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(ln) })
	cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		srv.Stop()
		b.Fatal(err)
	}
	return testpb.NewTestServiceClient(cc), func() {
		cc.Close()
		srv.Stop()
		wg.Wait()
	}
}

// benchUnary makes b.N calls one after another and reports the median
// and 99th percentile round trip.
func benchUnary(b *testing.B, c testpb.TestServiceClient) {
	ctx := context.Background()
	req := &testpb.SimpleRequest{ResponseSize: benchSize, Payload: &testpb.Payload{Body: make([]byte, benchSize)}}
	for range 500 { // warm up: connections, pools, caches
		if _, err := c.UnaryCall(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	rtts := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		resp, err := c.UnaryCall(ctx, req)
		rtts = append(rtts, time.Since(start))
		if err != nil || len(resp.GetPayload().GetBody()) != benchSize {
			b.Fatalf("UnaryCall: %v", err)
		}
	}
	b.StopTimer()
	reportLatency(b, rtts)
}

// reportLatency reports the median and 99th percentile of rtts in
// microseconds.
func reportLatency(b *testing.B, rtts []time.Duration) {
	if len(rtts) == 0 {
		return
	}
	slices.Sort(rtts)
	us := func(q float64) float64 {
		return float64(rtts[int(q*float64(len(rtts)-1))]) / float64(time.Microsecond)
	}
	b.ReportMetric(us(0.5), "p50-µs")
	b.ReportMetric(us(0.99), "p99-µs")
}

// BenchmarkUnaryCallInterleaved makes the calls of BenchmarkUnaryCall
// over every transport in turn, 100 at a time, so that all of them meet
// the same load from the rest of the machine. It reports each one's
// median and 99th percentile, how many times longer the median over
// grpc-go/TCP is than each median over Homa (speedup-*), and, as the
// floor, the same round trip of bare sock.Socket calls over UDP, with
// and without polling (a 130-byte request and response, the size of the
// framed gRPC messages).
//
//	go test -run '^$' -bench UnaryCallInterleaved -benchtime 20000x ./sock/homagrpc
func BenchmarkUnaryCallInterleaved(b *testing.B) {
	type proto struct {
		name string
		call func() error
		rtts []time.Duration
	}
	var protos []*proto
	ctx := context.Background()
	req := &testpb.SimpleRequest{ResponseSize: benchSize, Payload: &testpb.Payload{Body: make([]byte, benchSize)}}
	unary := func(c testpb.TestServiceClient) func() error {
		return func() error {
			resp, err := c.UnaryCall(ctx, req)
			if err == nil && len(resp.GetPayload().GetBody()) != benchSize {
				err = fmt.Errorf("%d bytes back", len(resp.GetPayload().GetBody()))
			}
			return err
		}
	}
	for _, tc := range socktest.BenchConfigs {
		c, stop, err := tryStartHoma(&tc.Cfg)
		if err != nil {
			b.Logf("leaving out %s: %v", tc.Name, err)
			continue
		}
		defer stop()
		protos = append(protos, &proto{name: tc.Name, call: unary(c)})
	}
	for _, tc := range []struct {
		name string
		cfg  sock.Config
	}{
		{"sock-udp", sock.Config{Transport: sock.UDP}},
		{"sock-udp-nopoll", sock.Config{Transport: sock.UDP, PollDuration: -1}},
	} {
		floor, stop, err := startSockEcho(&tc.cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer stop()
		protos = append(protos, &proto{name: tc.name, call: floor})
	}
	c, stop := startGRPC(b)
	defer stop()
	tcp := &proto{name: "grpc-tcp", call: unary(c)}
	protos = append(protos, tcp)

	timed := func(p *proto) time.Duration {
		start := time.Now()
		err := p.call()
		d := time.Since(start)
		if err != nil {
			b.Fatalf("%s: %v", p.name, err)
		}
		return d
	}
	for _, p := range protos {
		for range 500 {
			timed(p)
		}
		p.rtts = make([]time.Duration, 0, b.N)
	}
	const block = 100
	b.ResetTimer()
	for done := 0; done < b.N; done += block {
		for _, p := range protos {
			for range min(block, b.N-done) {
				p.rtts = append(p.rtts, timed(p))
			}
		}
	}
	b.StopTimer()
	us := func(p *proto, q float64) float64 {
		return float64(p.rtts[int(q*float64(len(p.rtts)-1))]) / float64(time.Microsecond)
	}
	for _, p := range protos {
		slices.Sort(p.rtts)
		b.ReportMetric(us(p, 0.5), p.name+"-p50-µs")
		b.ReportMetric(us(p, 0.99), p.name+"-p99-µs")
	}
	for _, p := range protos {
		if strings.HasPrefix(p.name, "homa-") {
			b.ReportMetric(us(tcp, 0.5)/us(p, 0.5), "speedup-"+p.name)
		}
	}
}

// startSockEcho runs a bare Homa echo on loopback and returns a function
// making one call of the size of a framed benchmark call.
func startSockEcho(cfg *sock.Config) (func() error, func(), error) {
	s, err := socktest.OpenFree("127.0.0.1", 27620, cfg)
	if err != nil {
		return nil, nil, err
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				m, err := s.Recv(context.Background(), sock.Any)
				if err != nil {
					return
				}
				_ = s.Reply(m, m.Data)
				m.Release()
			}
		})
	}
	c, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:0"), cfg)
	if err != nil {
		s.Close()
		wg.Wait()
		return nil, nil, err
	}
	msg := make([]byte, benchSize+30)
	call := func() error {
		m, err := c.Call(context.Background(), s.LocalAddr(), msg)
		if err != nil {
			return err
		}
		m.Release()
		return nil
	}
	return call, func() { c.Close(); s.Close(); wg.Wait() }, nil
}

// BenchmarkMem measures what the gRPC layer costs on top of Homa: the
// same round trip as BenchmarkUnaryCall on an in-memory network, through
// the generated stub and as a bare sock.Socket call of the same size.
// No kernel is involved, so ns/op and allocs/op are the CPU the two
// engines and the layer above them spend per call.
//
//	go test -run '^$' -bench Mem -benchmem ./sock/homagrpc
func BenchmarkMem(b *testing.B) {
	nw := memnet.New(memnet.Config{})
	defer nw.Close()
	cfg := &sock.Config{PollDuration: -1}
	open := func(addr netip.AddrPort) *sock.Socket {
		conn, err := socktest.OpenMem(nw, addr, cfg)
		if err != nil {
			b.Fatal(err)
		}
		return conn
	}
	b.Run("sock", func(b *testing.B) {
		s := open(netip.MustParseAddrPort("10.0.0.1:4001"))
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				m, err := s.Recv(context.Background(), sock.Any)
				if err != nil {
					return
				}
				_ = s.Reply(m, m.Data)
				m.Release()
			}
		})
		c := open(netip.AddrPortFrom(clientHost, 0))
		defer func() { c.Close(); s.Close(); wg.Wait() }()
		msg := make([]byte, benchSize+30)
		b.ReportAllocs()
		for b.Loop() {
			m, err := c.Call(context.Background(), s.LocalAddr(), msg)
			if err != nil {
				b.Fatal(err)
			}
			m.Release()
		}
	})
	b.Run("homagrpc", func(b *testing.B) {
		s := open(netip.MustParseAddrPort("10.0.0.1:4002"))
		srv := homagrpc.NewServer()
		testpb.RegisterTestServiceServer(srv, benchService{})
		var wg sync.WaitGroup
		wg.Go(func() { _ = srv.Serve(s) })
		cs := open(netip.AddrPortFrom(clientHost, 0))
		defer func() { cs.Close(); srv.Stop(); wg.Wait() }()
		c := testpb.NewTestServiceClient(homagrpc.NewClientConn(cs, s.LocalAddr()))
		req := &testpb.SimpleRequest{ResponseSize: benchSize, Payload: &testpb.Payload{Body: make([]byte, benchSize)}}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.UnaryCall(context.Background(), req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
