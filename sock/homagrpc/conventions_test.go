package homagrpc_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/homa-go/homa/homa/memnet"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/gzip"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/reflection"
	reflectpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/stats"

	"github.com/homa-go/homa/sock/homagrpc"
)

// countingGzip is gzip under another name, counting its uses.
type countingGzip struct {
	encoding.Compressor
	compressed, decompressed atomic.Int64
}

func (c *countingGzip) Name() string { return "counting-gzip" }

func (c *countingGzip) Compress(w io.Writer) (io.WriteCloser, error) {
	c.compressed.Add(1)
	return c.Compressor.Compress(w)
}

func (c *countingGzip) Decompress(r io.Reader) (io.Reader, error) {
	c.decompressed.Add(1)
	return c.Compressor.Decompress(r)
}

var counting = &countingGzip{Compressor: encoding.GetCompressor(gzip.Name)}

func init() { encoding.RegisterCompressor(counting) }

// grpc.UseCompressor compresses requests with the registered codec, and
// the server answers with the same one, for unary calls and streams; an
// unregistered name fails the call with a clear error.
func TestCompression(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newStreamWorld(t, &streamService{})
		defer w.close(t)
		c := w.client(t)
		ctx := context.Background()
		z := grpc.UseCompressor(counting.Name())
		counting.compressed.Store(0)
		counting.decompressed.Store(0)

		// A stream: three requests, three responses.
		st, err := c.StreamingInputCall(ctx, z)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := st.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: bytes.Repeat([]byte("a"), 100_000)}}); err != nil {
				t.Fatal(err)
			}
		}
		resp, err := st.CloseAndRecv()
		if err != nil || resp.GetAggregatedPayloadSize() != 300_000 {
			t.Fatalf("CloseAndRecv: %v, %v", resp, err)
		}
		// Each of 3 requests and 1 response compressed once and
		// decompressed once.
		if c, d := counting.compressed.Load(), counting.decompressed.Load(); c != 4 || d != 4 {
			t.Errorf("stream: %d compressions, %d decompressions, want 4 and 4", c, d)
		}

		// A unary call, against a server that also speaks it.
		uw := newMemWorld(t, memnet.Config{}, &testService{})
		defer uw.close(t)
		uc := testpb.NewTestServiceClient(uw.dial(t, serverAddr))
		counting.compressed.Store(0)
		counting.decompressed.Store(0)
		ur, err := uc.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 50_000, Payload: &testpb.Payload{Body: make([]byte, 50_000)}}, z)
		if err != nil || len(ur.GetPayload().GetBody()) != 50_000 {
			t.Fatalf("UnaryCall: %v", err)
		}
		if c, d := counting.compressed.Load(), counting.decompressed.Load(); c != 2 || d != 2 {
			t.Errorf("unary: %d compressions, %d decompressions, want 2 and 2", c, d)
		}

		_, err = uc.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.UseCompressor("no-such"))
		wantCode(t, "unregistered compressor", err, codes.Internal)
	})
}

// recorder is a stats.Handler that records the types of the events.
type recorder struct {
	mu     sync.Mutex
	events []string
	tagged atomic.Int32
}

type tagKey struct{}

func (r *recorder) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	r.tagged.Add(1)
	return context.WithValue(ctx, tagKey{}, info.FullMethodName)
}

func (r *recorder) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if ctx.Value(tagKey{}) == nil {
		panic("HandleRPC without the tagged context")
	}
	name := reflect.TypeOf(s).Elem().Name()
	if e, ok := s.(*stats.End); ok && e.Error != nil {
		name += "(" + fmt.Sprint(e.Error) + ")"
	}
	r.mu.Lock()
	r.events = append(r.events, name)
	r.mu.Unlock()
}

func (r *recorder) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (r *recorder) HandleConn(context.Context, stats.ConnStats)                       {}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.events
	r.events = nil
	return e
}

// Stats handlers on both sides see the events of unary calls and
// streams in grpc-go's order.
func TestStatsHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srvRec, cliRec := &recorder{}, &recorder{}
		w := newStreamWorld(t, &streamService{}, homagrpc.StatsHandler(srvRec))
		defer w.close(t)
		c := w.client(t, homagrpc.WithStatsHandler(cliRec))
		ctx := context.Background()

		st, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{ResponseParameters: params(1, 2)})
		if err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := st.Recv(); err == io.EOF {
				break
			} else if err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		want := []string{"Begin", "OutHeader", "OutPayload", "InHeader", "InPayload", "InPayload", "InTrailer", "End"}
		if got := cliRec.take(); !slices.Equal(got, want) {
			t.Errorf("client stream events %v, want %v", got, want)
		}
		want = []string{"Begin", "InHeader", "InPayload", "OutHeader", "OutPayload", "OutPayload", "OutTrailer", "End"}
		if got := srvRec.take(); !slices.Equal(got, want) {
			t.Errorf("server stream events %v, want %v", got, want)
		}

		uw := newMemWorld(t, memnet.Config{}, &testService{}, homagrpc.StatsHandler(srvRec))
		defer uw.close(t)
		uc := testpb.NewTestServiceClient(uw.dial(t, serverAddr, homagrpc.WithStatsHandler(cliRec)))
		if _, err := uc.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 10}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		want = []string{"Begin", "OutHeader", "OutPayload", "InHeader", "InPayload", "InTrailer", "End"}
		if got := cliRec.take(); !slices.Equal(got, want) {
			t.Errorf("client unary events %v, want %v", got, want)
		}
		want = []string{"Begin", "InHeader", "InPayload", "OutHeader", "OutPayload", "OutTrailer", "End"}
		if got := srvRec.take(); !slices.Equal(got, want) {
			t.Errorf("server unary events %v, want %v", got, want)
		}
		if cliRec.tagged.Load() != 2 || srvRec.tagged.Load() != 2 {
			t.Errorf("TagRPC called %d times on the client, %d on the server, want 2 each", cliRec.tagged.Load(), srvRec.tagged.Load())
		}
	})
}

// ParseTarget takes one or more addresses, with or without the homa
// scheme, and refuses what is not an address.
func TestParseTarget(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"homa:///10.0.0.1:5000,10.0.0.2:5000", []string{"10.0.0.1:5000", "10.0.0.2:5000"}},
		{"10.0.0.1:5000", []string{"10.0.0.1:5000"}},
		{"homa:///[::1]:7", []string{"[::1]:7"}},
		{"dns:///x:5000", nil},
		{"homa://auth/10.0.0.1:5000", nil},
		{"homa:///10.0.0.1", nil},
		{"homa:///10.0.0.1:0", nil},
		{"homa:///host.example:5000", nil},
		{"", nil},
	} {
		got, err := homagrpc.ParseTarget(tc.in)
		checkTargets(t, "ParseTarget", tc.in, got, err, tc.want)
	}
}

// Round robin spreads calls and streams over the servers in turn; pick
// first sends everything to the first until it stops answering, then to
// the next.
func TestBalancers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := newNetwork(t)
		addrs := []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:4000"), netip.MustParseAddrPort("10.0.0.3:4000"), netip.MustParseAddrPort("10.0.0.4:4000")}
		var srvs []*homagrpc.Server
		for _, a := range addrs {
			srvs = append(srvs, serveAt(t, nw, a, &streamService{}))
		}
		dial := func(b homagrpc.Balancer) testpb.TestServiceClient {
			cc, err := homagrpc.NewClientConnTarget(clientSocket(t, nw), addrs, homagrpc.WithBalancer(b))
			if err != nil {
				t.Fatal(err)
			}
			return testpb.NewTestServiceClient(cc)
		}
		calls := func() []uint64 {
			var n []uint64
			for _, s := range srvs {
				n = append(n, s.Stats().Calls)
			}
			return n
		}
		ctx := context.Background()

		rr := dial(homagrpc.RoundRobin)
		for range 4 {
			if _, err := rr.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
				t.Fatal(err)
			}
			st, err := rr.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Recv(); err != io.EOF {
				t.Fatal(err)
			}
		}
		if got := calls(); !slices.Equal(got, []uint64{3, 3, 2}) {
			t.Errorf("round robin: calls per server %v, want [3 3 2]", got)
		}

		pf := dial(homagrpc.PickFirst)
		for range 3 {
			if _, err := pf.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
				t.Fatal(err)
			}
		}
		if got := calls(); !slices.Equal(got, []uint64{6, 3, 2}) {
			t.Errorf("pick first: calls per server %v, want [6 3 2]", got)
		}
		srvs[0].Stop()
		_, err := pf.UnaryCall(ctx, &testpb.SimpleRequest{})
		wantCode(t, "call to a stopped server", err, codes.Unavailable)
		for range 2 {
			if _, err := pf.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
				t.Fatal(err)
			}
		}
		if got := calls(); !slices.Equal(got, []uint64{6, 5, 2}) {
			t.Errorf("pick first after the first stopped: calls per server %v, want [6 5 2]", got)
		}
	})
}

// One registration through Mirror serves the same service over Homa and
// over grpc-go's HTTP/2 on TCP, reflection included.
func TestMirror(t *testing.T) {
	gs := grpc.NewServer()
	var w *memWorld
	synctest.Test(t, func(t *testing.T) {
		w = serveMem(t, memnet.Config{}, func(hs grpc.ServiceRegistrar) {
			both := homagrpc.Mirror(hs, gs)
			testpb.RegisterTestServiceServer(both, &testService{})
			reflection.Register(both)
		})
		defer w.close(t)
		if _, err := testpb.NewTestServiceClient(w.dial(t, serverAddr)).UnaryCall(context.Background(), &testpb.SimpleRequest{ResponseSize: 3}); err != nil {
			t.Errorf("over Homa: %v", err)
		}
	})

	cc := serveTCP(t, gs)
	resp, err := testpb.NewTestServiceClient(cc).UnaryCall(context.Background(), &testpb.SimpleRequest{ResponseSize: 3})
	if err != nil || len(resp.GetPayload().GetBody()) != 3 {
		t.Fatalf("over TCP: %v", err)
	}
	rc, err := reflectpb.NewServerReflectionClient(cc).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Send(&reflectpb.ServerReflectionRequest{MessageRequest: &reflectpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	lr, err := rc.Recv()
	if err != nil {
		t.Fatalf("reflection over TCP: %v", err)
	}
	if !slices.ContainsFunc(lr.GetListServicesResponse().GetService(), func(s *reflectpb.ServiceResponse) bool {
		return s.GetName() == "grpc.testing.TestService"
	}) {
		t.Errorf("reflection over TCP lists %v, without grpc.testing.TestService", lr.GetListServicesResponse())
	}
}
