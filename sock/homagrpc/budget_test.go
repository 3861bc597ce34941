package homagrpc_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/homa-go/homa/sock/homagrpc"
)

// MaxStreamMemory bounds what all the streams hold unread together: a
// stream that would pass it fails with ResourceExhausted, and what the
// streams held goes back to the budget when they end. (The client
// host's share is the whole budget here: TestStreamMemoryPerHost tests
// the shares.)
func TestStreamMemoryBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window, budget, size = 200_000, 300_000, 50_000
		w := newStreamWorld(t, &streamService{}, homagrpc.InitialWindowSize(window), homagrpc.MaxStreamMemory(budget), homagrpc.MaxStreamMemoryPerHost(budget))
		defer w.close(t)
		c := w.client(t)
		msg := &testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: make([]byte, size)}}

		// HalfDuplexCall reads nothing: each stream fills its window.
		ctx1, cancel1 := context.WithCancel(context.Background())
		first, err := c.HalfDuplexCall(ctx1)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for first.Send(msg) == nil {
			}
		}()
		// Let the bubble's clock run past the engine's reader grace: a
		// server goroutine waiting for any message may wait that long for
		// the socket to be read.
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		if got := homagrpc.StreamMemoryForTest(w.srv); got < window-size || got > budget {
			t.Errorf("one stream holds %d bytes of the budget, want about its window %d", got, window)
		}
		second, err := c.HalfDuplexCall(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for second.Send(msg) == nil {
			}
		}()
		_, err = second.Recv()
		wantCode(t, "a stream past the budget", err, codes.ResourceExhausted)
		if st := w.srv.Stats(); st.OverMemory != 1 || st.OverMemoryPerHost != 0 {
			t.Errorf("stats count %d streams failed at MaxStreamMemory and %d at the host's share, want 1 and 0", st.OverMemory, st.OverMemoryPerHost)
		}
		if got := homagrpc.StreamMemoryForTest(w.srv); got > budget {
			t.Errorf("the streams hold %d bytes, over the budget of %d", got, budget)
		}
		cancel1()
		synctest.Wait()
		if got := homagrpc.StreamMemoryForTest(w.srv); got != 0 {
			t.Errorf("%d bytes still held after the streams ended", got)
		}
	})
}
