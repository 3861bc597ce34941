package homagrpc

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/homa-go/homa/sock"
)

// A client told by the server that it no longer knows a stream (a
// response numbered 0) sends no more pulls while a frame of the stream
// is still unanswered: the answer in flight brings the stream's end,
// and every pull meanwhile would only be told the same again. Here a
// hand-made server answers the open, holds the data frame SendMsg sent
// (nobody awaits its answer: the caller does not call RecvMsg), and
// answers each pull with "not open"; it counts the pulls.
func TestStreamLostStopsPulling(t *testing.T) {
	// Canceled: the server never knew the stream or forgot its end;
	// OK: the stream ended well, its end still on its way.
	for _, code := range []codes.Code{codes.Canceled, codes.OK} {
		t.Run(code.String(), func(t *testing.T) { testStreamLost(t, code) })
	}
}

func testStreamLost(t *testing.T, code codes.Code) {
	synctest.Test(t, func(t *testing.T) {
		_, ss, cs, srvAddr := bubblePair(t)
		defer ss.Close()
		defer cs.Close()

		const maxPulls = 50 // the server holds the pulls past these
		var (
			mu    sync.Mutex
			pulls int
			held  []*sock.Message // the data frame, the first pull, the pulls past maxPulls
		)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			for {
				m, err := ss.Recv(ctx, sock.Any)
				if err != nil {
					return
				}
				r, err := parseStreamReq(m.Data)
				if err != nil {
					t.Errorf("the client sent a malformed frame: %v", err)
					m.Release()
					return
				}
				mu.Lock()
				switch {
				case r.op == opPulls:
					// As a server before pull sets: the client's
					// streams then pull alone.
					_ = ss.ReplyOwned(m, endFrameBytes(status.New(codes.Internal, "stream op 5")))
					m.Release()
				case r.op == opOpen:
					b := appendStreamRespHeader(nil, 0, 1, 1<<20)
					b, _ = appendResponseHeader(b, 0, "", nil, nil, nil)
					_ = ss.ReplyOwned(m, b)
					m.Release()
				case r.op == opPull && pulls > 0 && pulls < maxPulls:
					pulls++
					_ = ss.ReplyOwned(m, endFrameBytes(status.New(code, "not open")))
					m.Release()
				default: // the data frame, the first pull, pulls past the limit
					if r.op == opPull {
						pulls++
					}
					held = append(held, m)
				}
				mu.Unlock()
			}
		}()

		cc := NewClientConn(cs, srvAddr)
		defer cc.Close()
		desc := &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}
		st, err := cc.NewStream(context.Background(), desc, testpb.TestService_FullDuplexCall_FullMethodName)
		if err != nil {
			t.Fatal(err)
		}
		req := &testpb.StreamingOutputCallRequest{}
		if err := st.SendMsg(req); err != nil { // goes in the open
			t.Fatal(err)
		}
		synctest.Wait()                         // the open answered, the first pull held
		if err := st.SendMsg(req); err != nil { // a data frame, held
			t.Fatal(err)
		}
		synctest.Wait()
		mu.Lock()
		if len(held) != 2 || pulls != 1 {
			t.Fatalf("the server holds %d frames and saw %d pulls, want the data frame and one pull", len(held), pulls)
		}
		// The stream is gone, says the answer to the pull.
		for i, m := range held {
			if r, _ := parseStreamReq(m.Data); r.op == opPull {
				_ = ss.ReplyOwned(m, endFrameBytes(status.New(code, "not open")))
				m.Release()
				held = append(held[:i], held[i+1:]...)
				break
			}
		}
		mu.Unlock()
		synctest.Wait()
		mu.Lock()
		if pulls != 1 {
			t.Errorf("%d pulls after the server said it does not know the stream, want none (1 in all)", pulls-1)
		}
		mu.Unlock()
		cancel()
		synctest.Wait()
		for _, m := range held {
			m.Release()
		}
	})
}
