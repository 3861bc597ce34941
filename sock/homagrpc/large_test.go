package homagrpc_test

import (
	"bytes"
	"context"
	"net/netip"
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

// Unary messages beyond one Homa message travel in pieces: 4,000,000
// bytes each way within grpc-go's default limit, and 8 MB each way with
// the limits raised, on a network that loses, duplicates and reorders
// packets; the metadata travels with them.
func TestLargeUnary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const big = 8_000_000
		w := newMemWorld(t, memnet.Config{Seed: 7, Loss: 0.01, Duplicate: 0.01, Reorder: 0.01}, &testService{}, homagrpc.MaxRecvMsgSize(big+100))
		defer w.close(t)
		c := w.client(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, tc := range []struct {
			req, resp int
			opts      []grpc.CallOption
		}{
			{4_000_000, 10, nil},
			{10, 4_000_000, nil},
			{4_000_000, 4_000_000, nil},
			{big, big, []grpc.CallOption{grpc.MaxCallRecvMsgSize(big + 100)}},
		} {
			body := bytes.Repeat([]byte{'x'}, tc.req)
			var hdr, trl metadata.MD
			octx := metadata.AppendToOutgoingContext(ctx, echoInitial, "a", echoTrailing, "b")
			resp, err := c.UnaryCall(octx, &testpb.SimpleRequest{ResponseSize: int32(tc.resp), Payload: &testpb.Payload{Body: body}},
				append(tc.opts, grpc.Header(&hdr), grpc.Trailer(&trl))...)
			if err != nil {
				t.Fatalf("UnaryCall %d bytes, %d back: %v", tc.req, tc.resp, err)
			}
			if got := len(resp.GetPayload().GetBody()); got != tc.resp {
				t.Errorf("UnaryCall %d bytes: %d bytes back, want %d", tc.req, got, tc.resp)
			}
			if len(hdr.Get(echoInitial)) != 1 || len(trl.Get(echoTrailing)) != 1 {
				t.Errorf("UnaryCall %d bytes, %d back: header %v, trailer %v", tc.req, tc.resp, hdr, trl)
			}
		}
		_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: big})
		wantCode(t, "8 MB over the client's default limit", err, codes.ResourceExhausted)
	})
}

// A message beyond the receiver's limit ends the stream with
// ResourceExhausted as soon as its bytes pass the limit; a client that
// sends beyond the credit it was given is refused the same way.
func TestStreamLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newStreamWorld(t, &streamService{}, homagrpc.MaxRecvMsgSize(100_000))
		defer w.close(t)
		c := w.client(t)
		st, err := c.StreamingInputCall(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		_ = st.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: make([]byte, 50_000)}})
		_ = st.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: make([]byte, 300_000)}})
		_, err = st.CloseAndRecv()
		wantCode(t, "a message over the server's limit", err, codes.ResourceExhausted)

		// A hand-made open frame with more bytes than the initial credit.
		conn, err := socktest.OpenMem(w.nw, netip.AddrPortFrom(clientHost, 0), testConfig())
		if err != nil {
			t.Fatal(err)
		}
		s := conn
		defer s.Close()
		frame := homagrpc.AppendOpenFrameForTest(nil, 42, testpb.TestService_StreamingInputCall_FullMethodName, 70_000)
		m, err := s.Call(context.Background(), serverAddr, frame)
		if err != nil {
			t.Fatal(err)
		}
		if code := homagrpc.StreamResponseCodeForTest(m.Data); code != codes.ResourceExhausted {
			t.Errorf("open frame beyond the initial credit: status %v, want ResourceExhausted", code)
		}
		m.Release()
		if st := status.Code(err); st != codes.OK {
			t.Fatal(err)
		}
	})
}
