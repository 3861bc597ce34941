package homagrpc_test

import (
	"context"
	"io"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/homa-go/homa/sock/homagrpc"
)

// The answer of a frame SendMsg sent is taken up even when the caller
// does not call RecvMsg for a long time: the stream stays alive (its
// pulls go on, the server does not take the client as gone), and the
// echoes are all there afterwards; Header, too, finds the header that
// came in such an answer.
func TestStreamCallerIdles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newStreamWorld(t, &streamService{})
		defer w.close(t)
		st, err := w.client(t).FullDuplexCall(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		// The first echo opens the stream; the next frames go from
		// SendMsg itself.
		send := func(i int) {
			t.Helper()
			if err := st.Send(&testpb.StreamingOutputCallRequest{ResponseParameters: params(int32(i))}); err != nil {
				t.Fatalf("Send %d: %v", i, err)
			}
		}
		send(1)
		if resp, err := st.Recv(); err != nil || len(resp.GetPayload().GetBody()) != 1 {
			t.Fatalf("Recv 1: %v", err)
		}
		send(2)
		if _, err := st.Header(); err != nil {
			t.Fatalf("Header: %v", err)
		}
		time.Sleep(10 * time.Second) // beyond the server's 4 s without a frame
		send(3)
		time.Sleep(10 * time.Second)
		for i := 2; i <= 3; i++ {
			if resp, err := st.Recv(); err != nil || len(resp.GetPayload().GetBody()) != i {
				t.Fatalf("Recv %d after idling: %v", i, err)
			}
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != io.EOF {
			t.Fatalf("Recv after CloseSend: %v, want io.EOF", err)
		}
	})
}

// A stream whose end came while the caller does not call RecvMsg sends
// no more frames (a pull the server answers "not known" is not sent
// again), and RecvMsg finds the end later.
func TestStreamEndWhileCallerIdles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newStreamWorld(t, &streamService{})
		defer w.close(t)
		cc := w.dial(t, serverAddr)
		st := openEchoed(t, testpb.NewTestServiceClient(cc), 3)
		s := homagrpc.SocketForTest(cc)
		before := s.Stats().RPCsStarted
		// The handler returns at this message: the end goes in its
		// answer, or in the pull's.
		end := &testpb.StreamingOutputCallRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(codes.FailedPrecondition), Message: "no"}}
		if err := st.Send(end); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		if n := s.Stats().RPCsStarted - before; n > 10 {
			t.Errorf("%d RPCs in 10 s after the stream's end, want a few", n)
		}
		_, err := st.Recv()
		if s := status.Convert(err); s.Code() != codes.FailedPrecondition {
			t.Errorf("Recv: %v, want FailedPrecondition", err)
		}
	})
}

// An open stream on which nothing is said costs its client one small
// RPC a second (the pull the server answers empty after holding it for
// StreamKeepalive) and the few RESENDs, each answered BUSY, with which
// the client asks about the pull while the server holds it, whose delay
// doubles each time, even while quick calls to the same server (unary
// calls every 2 ms here), whose prompt answers keep the client's
// timing toward the server plain, go on beside it: 8 a second, where
// asking every resend interval cost 200.
func TestIdleStreamCost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newStreamWorld(t, &streamService{})
		defer w.close(t)
		s := clientSocket(t, w.nw)
		c := homagrpc.NewClientConn(s, serverAddr)
		st := openEchoed(t, testpb.NewTestServiceClient(c), 1)
		const idle = 10 * time.Second
		before := s.Stats()
		tc := testpb.NewTestServiceClient(c)
		for range idle / (2 * time.Millisecond) {
			if _, err := tc.UnaryCall(context.Background(), &testpb.SimpleRequest{}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Millisecond)
		}
		after := s.Stats()
		calls := uint64(idle / (2 * time.Millisecond))
		rpcs, resends := after.RPCsStarted-before.RPCsStarted-calls, after.ResendsSent-before.ResendsSent
		t.Logf("idle for %v beside %d unary calls: %d RPCs of the stream, %d RESENDs", idle, calls, rpcs, resends)
		if rpcs < 5 || rpcs > 12 {
			t.Errorf("%d RPCs of the stream in %v of idling, want about one a second", rpcs, idle)
		}
		if resends > 10*uint64(idle/time.Second) {
			t.Errorf("%d RESENDs in %v of idling, want at most 10 a second", resends, idle)
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != io.EOF {
			t.Fatalf("Recv after CloseSend: %v, want io.EOF", err)
		}
	})
}

// openEchoed opens a bidirectional stream with c and has one message of
// size bytes echoed on it.
func openEchoed(t *testing.T, c testpb.TestServiceClient, size int32) testpb.TestService_FullDuplexCallClient {
	t.Helper()
	st, err := c.FullDuplexCall(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&testpb.StreamingOutputCallRequest{ResponseParameters: params(size)}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	return st
}
