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

// A message and its echo, one at a time, go without the stream's sender
// goroutine: SendMsg sends the frame and RecvMsg awaits its answer, so
// the sender does not wake up per message (each wake-up of a parked
// goroutine costs a thread wake-up on a busy machine).
func TestStreamPingPongSenderStaysAsleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newStreamWorld(t, &streamService{})
		defer w.close(t)
		cc := w.dial(t, serverAddr)
		st, err := testpb.NewTestServiceClient(cc).FullDuplexCall(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		const n = 200
		before := uint64(0)
		for i := range n {
			if i == 10 {
				// The open's answer has come and the puller runs:
				// count from here.
				before = homagrpc.SenderWakesForTest(cc)
			}
			if err := st.Send(&testpb.StreamingOutputCallRequest{ResponseParameters: params(10)}); err != nil {
				t.Fatalf("Send %d: %v", i, err)
			}
			if resp, err := st.Recv(); err != nil || len(resp.GetPayload().GetBody()) != 10 {
				t.Fatalf("Recv %d: %v", i, err)
			}
		}
		if wakes := homagrpc.SenderWakesForTest(cc) - before; wakes > (n-10)/10 {
			t.Errorf("the sender woke %d times for %d messages one at a time, want at most one per ten", wakes, n-10)
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != io.EOF {
			t.Fatalf("Recv after CloseSend: %v, want io.EOF", err)
		}
	})
}

// A frame SendMsg sent is awaited even when the caller does not call
// RecvMsg for a long time: the stream stays alive (its pulls go on, the
// server does not take the client as gone), and the echoes are all
// there afterwards; Header, too, finds the header that came in such an
// answer.
func TestStreamAnswerNobodyAwaits(t *testing.T) {
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

// A stream canceled while the answer of a frame SendMsg sent waits for
// RecvMsg leaves nothing at the client socket: the answer, which came
// meanwhile, is aborted (else the socket would keep it for a Recv that
// never comes).
func TestStreamCanceledWithAnswerWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newStreamWorld(t, &streamService{})
		defer w.close(t)
		cc := w.dial(t, serverAddr)
		ctx, cancel := context.WithCancel(context.Background())
		st, err := testpb.NewTestServiceClient(cc).FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		req := &testpb.StreamingOutputCallRequest{ResponseParameters: params(10)}
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
		if err := st.Send(req); err != nil { // its answer: nobody awaits it
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // the answer arrives
		cancel()
		time.Sleep(100 * time.Millisecond)
		if got := homagrpc.AnswersDroppedForTest(cc); got != 1 {
			t.Errorf("%d answers the socket held dropped at the cancel, want 1", got)
		}
	})
}

// A stream whose end came in the answer of a frame SendMsg sent, which
// nobody awaits yet, does not keep pulling: the puller, told that the
// server no longer knows the stream, takes that answer up itself.
func TestStreamEndInAnswerNobodyAwaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newStreamWorld(t, &streamService{})
		defer w.close(t)
		cc := w.dial(t, serverAddr)
		st, err := testpb.NewTestServiceClient(cc).FullDuplexCall(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&testpb.StreamingOutputCallRequest{ResponseParameters: params(3)}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
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
		_, err = st.Recv()
		if s := status.Convert(err); s.Code() != codes.FailedPrecondition {
			t.Errorf("Recv: %v, want FailedPrecondition", err)
		}
	})
}
