package homagrpc_test

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/gzip"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/sock/homagrpc"
)

// replyGzip is gzip under a third name, counting its uses; only the
// server's responses use it.
type replyGzip struct{ countingGzip }

func (*replyGzip) Name() string { return "reply-gzip" }

var replyComp = &replyGzip{countingGzip{Compressor: encoding.GetCompressor(gzip.Name)}}

func init() { encoding.RegisterCompressor(replyComp) }

// sendCompService chooses its responses' compressor by the request's
// metadata entry x-send-comp, and records what it saw.
type sendCompService struct {
	testpb.UnimplementedTestServiceServer

	mu       sync.Mutex
	accepts  []string
	md       metadata.MD
	grpcErr  error // grpc.SetSendCompressor's
	unsetErr error // SetSendCompressor after SendHeader
}

func (s *sendCompService) choose(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	accepts, err := homagrpc.ClientSupportedCompressors(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.accepts, s.md = accepts, md
	s.grpcErr = grpc.SetSendCompressor(ctx, replyComp.Name())
	s.mu.Unlock()
	if v := md.Get("x-send-comp"); len(v) > 0 {
		if err := homagrpc.SetSendCompressor(ctx, v[0]); err != nil {
			return status.Error(codes.FailedPrecondition, err.Error())
		}
	}
	return nil
}

func (s *sendCompService) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if err := s.choose(ctx); err != nil {
		return nil, err
	}
	return &testpb.SimpleResponse{Payload: &testpb.Payload{Body: make([]byte, req.GetResponseSize())}}, nil
}

func (s *sendCompService) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, ss testpb.TestService_StreamingOutputCallServer) error {
	if err := s.choose(ss.Context()); err != nil {
		return err
	}
	for _, p := range req.GetResponseParameters() {
		if err := ss.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: make([]byte, p.GetSize())}}); err != nil {
			return err
		}
	}
	// The messages sent, the header has gone.
	s.mu.Lock()
	s.unsetErr = homagrpc.SetSendCompressor(ss.Context(), replyComp.Name())
	s.mu.Unlock()
	return nil
}

// A handler's SetSendCompressor compresses its responses with the
// compressor it names when the client accepts it, for unary calls and
// streams; the client decompresses them; an unregistered or unadvertised
// name fails as in grpc-go; identity turns compression off.
func TestSetSendCompressor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc := &sendCompService{}
		w := serveMem(t, memnet.Config{}, func(r grpc.ServiceRegistrar) { testpb.RegisterTestServiceServer(r, svc) })
		defer w.close(t)
		accepting := w.client(t, homagrpc.WithAcceptCompressors(replyComp.Name()))
		plain := w.client(t)
		choose := func(name string) context.Context {
			return metadata.AppendToOutgoingContext(context.Background(), "x-send-comp", name)
		}
		reset := func() {
			replyComp.compressed.Store(0)
			replyComp.decompressed.Store(0)
			counting.compressed.Store(0)
			counting.decompressed.Store(0)
		}
		counts := func(what string, rc, rd, cc, cd int64) {
			t.Helper()
			if a, b, c, d := replyComp.compressed.Load(), replyComp.decompressed.Load(), counting.compressed.Load(), counting.decompressed.Load(); a != rc || b != rd || c != cc || d != cd {
				t.Errorf("%s: reply-gzip %d/%d, counting-gzip %d/%d compressions/decompressions, want %d/%d, %d/%d", what, a, b, c, d, rc, rd, cc, cd)
			}
		}

		// Unary: the response alone is compressed, by reply-gzip.
		reset()
		var header metadata.MD
		r, err := accepting.UnaryCall(choose(replyComp.Name()), &testpb.SimpleRequest{ResponseSize: 10_000}, grpc.Header(&header))
		if err != nil || len(r.GetPayload().GetBody()) != 10_000 {
			t.Fatalf("unary: %v", err)
		}
		counts("unary", 1, 1, 0, 0)
		if header.Get("grpc-encoding") != nil {
			t.Errorf("the caller's header holds grpc-encoding: %v", header)
		}
		svc.mu.Lock()
		if !strings.Contains(strings.Join(svc.accepts, ","), replyComp.Name()) {
			t.Errorf("ClientSupportedCompressors = %v, want reply-gzip among them", svc.accepts)
		}
		if svc.md.Get("grpc-accept-encoding") != nil {
			t.Errorf("the handler's metadata holds grpc-accept-encoding: %v", svc.md)
		}
		if svc.grpcErr == nil {
			t.Error("grpc.SetSendCompressor succeeded in a homagrpc handler; SetSendCompressor's doc says it fails")
		}
		svc.mu.Unlock()

		// A stream: each of three responses compressed by reply-gzip.
		reset()
		st, err := accepting.StreamingOutputCall(choose(replyComp.Name()), &testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{Size: 5000}, {Size: 6000}, {Size: 7000}}})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			m, err := st.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("stream: %v", err)
			}
			n += len(m.GetPayload().GetBody())
		}
		if n != 18_000 {
			t.Errorf("stream: %d bytes, want 18000", n)
		}
		counts("stream", 3, 3, 0, 0)
		svc.mu.Lock()
		if svc.unsetErr == nil {
			t.Error("SetSendCompressor after the header was sent succeeded")
		}
		svc.mu.Unlock()

		// identity: a compressed request, an uncompressed response.
		reset()
		if _, err := accepting.UnaryCall(choose("identity"), &testpb.SimpleRequest{ResponseSize: 100}, grpc.UseCompressor(counting.Name())); err != nil {
			t.Fatalf("identity: %v", err)
		}
		counts("identity", 0, 0, 1, 1)

		// Failures, in grpc-go's words.
		_, err = plain.UnaryCall(choose(replyComp.Name()), &testpb.SimpleRequest{})
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `client does not support compressor "reply-gzip"`) {
			t.Errorf("unadvertised compressor: %v", err)
		}
		_, err = accepting.UnaryCall(choose("no-such"), &testpb.SimpleRequest{})
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `compressor not registered "no-such"`) {
			t.Errorf("unregistered compressor: %v", err)
		}
		// gzip is advertised by default when registered, as grpc-go
		// advertises every registered compressor.
		if _, err := plain.UnaryCall(choose(gzip.Name), &testpb.SimpleRequest{ResponseSize: 100}); err != nil {
			t.Errorf("gzip without WithAcceptCompressors: %v", err)
		}
	})
}

// SetSendCompressor in a handler that grpc-go serves calls grpc-go's
// own, so a handler registered through Mirror works on both.
func TestSetSendCompressorGRPC(t *testing.T) {
	gs := grpc.NewServer()
	testpb.RegisterTestServiceServer(gs, &sendCompService{})
	cc := serveTCP(t, gs)
	replyComp.compressed.Store(0)
	replyComp.decompressed.Store(0)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-send-comp", replyComp.Name())
	if _, err := testpb.NewTestServiceClient(cc).UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 1000}); err != nil {
		t.Fatal(err)
	}
	if c, d := replyComp.compressed.Load(), replyComp.decompressed.Load(); c != 1 || d != 1 {
		t.Errorf("over grpc-go: reply-gzip %d/%d compressions/decompressions, want 1/1", c, d)
	}
}
