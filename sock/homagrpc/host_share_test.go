package homagrpc_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/homa-go/homa/sock/homagrpc"
)

// otherHost is a client host beside clientHost.
var otherHost = netip.MustParseAddr("10.0.0.3")

// clientAt returns a client of w's server from a socket of its own at
// host, closed at the end of the test.
func (w *memWorld) clientAt(t *testing.T, host netip.Addr) testpb.TestServiceClient {
	t.Helper()
	return testpb.NewTestServiceClient(homagrpc.NewClientConn(socketAt(t, w.nw, host), serverAddr))
}

// echoOnce opens a bidirectional stream on c and has one message
// echoed on it: the error is the stream's, nil once the server took it.
func echoOnce(ctx context.Context, c testpb.TestServiceClient) (testpb.TestService_FullDuplexCallClient, error) {
	st, err := c.FullDuplexCall(ctx)
	if err != nil {
		return nil, err
	}
	if err := st.Send(&testpb.StreamingOutputCallRequest{ResponseParameters: params(1)}); err != nil {
		return nil, err
	}
	if _, err := st.Recv(); err != nil {
		return nil, err
	}
	return st, nil
}

// One client host holds at most its share of a socket's streams
// (MaxStreamsPerHost, by default a fifth of MaxConcurrentCalls),
// whatever ports it opens them from: its next stream is refused with
// ResourceExhausted naming the bound (and counted), while another
// host's streams are taken, and the host may open more once its streams
// end.
func TestStreamsPerHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newStreamWorld(t, &streamService{}, homagrpc.MaxConcurrentCalls(10)) // a host's share: 2
		defer w.close(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		a1, a2 := w.clientAt(t, clientHost), w.clientAt(t, clientHost)
		var open []testpb.TestService_FullDuplexCallClient
		for i, c := range []testpb.TestServiceClient{a1, a2} {
			st, err := echoOnce(ctx, c)
			if err != nil {
				t.Fatalf("host A's stream %d, within its share: %v", i, err)
			}
			open = append(open, st)
		}
		for i, c := range []testpb.TestServiceClient{a1, a2} {
			_, err := echoOnce(ctx, c)
			if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "MaxStreamsPerHost") {
				t.Errorf("host A's stream beyond its share, port %d: %v, want ResourceExhausted naming MaxStreamsPerHost", i, err)
			}
		}
		if st := w.srv.Stats(); st.RefusedPerHost != 2 || st.Refused != 0 {
			t.Errorf("stats count %d streams refused for their host's share and %d for the server's bound, want 2 and 0", st.RefusedPerHost, st.Refused)
		}
		b := w.clientAt(t, otherHost)
		for i := range 2 {
			st, err := echoOnce(ctx, b)
			if err != nil {
				t.Fatalf("host B's stream %d while host A holds its share: %v", i, err)
			}
			open = append(open, st)
		}
		// A's streams end: its share is free again.
		for _, st := range open[:2] {
			if err := st.CloseSend(); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Recv(); err == nil {
				t.Fatal("a half-closed echo stream goes on")
			}
		}
		synctest.Wait()
		if _, err := echoOnce(ctx, a1); err != nil {
			t.Errorf("host A's stream after its others ended: %v", err)
		}
	})
}

// The streams of one client host hold at most its share of
// MaxStreamMemory (MaxStreamMemoryPerHost, by default a quarter of it):
// a stream of a host that fills its share fails with ResourceExhausted
// naming that bound, while another host's stream still has room for
// its window, and every byte goes back when the streams end, and the
// hosts' shares with them.
func TestStreamMemoryPerHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window, budget, size = 200_000, 1_000_000, 50_000 // a host's share: 250,000
		w := newStreamWorld(t, &streamService{}, homagrpc.InitialWindowSize(window), homagrpc.MaxStreamMemory(budget))
		defer w.close(t)
		msg := &testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: make([]byte, size)}}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// fill opens a stream whose handler reads nothing and sends
		// into it until it fails.
		fill := func(ctx context.Context, c testpb.TestServiceClient) testpb.TestService_HalfDuplexCallClient {
			st, err := c.HalfDuplexCall(ctx)
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				for st.Send(msg) == nil {
				}
			}()
			time.Sleep(10 * time.Millisecond) // past the engine's reader grace
			synctest.Wait()
			return st
		}
		a := w.clientAt(t, clientHost)
		fill(ctx, a)
		held := homagrpc.StreamMemoryForTest(w.srv)
		if held < window-size || held > window+size+64 { // a window and a message at most
			t.Fatalf("host A's first stream holds %d bytes, want about its window %d", held, window)
		}
		// Refused within a second, or not at all.
		ctx2, cancel2 := context.WithTimeout(ctx, time.Second)
		defer cancel2()
		second := fill(ctx2, a)
		_, err := second.Recv()
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "MaxStreamMemoryPerHost") {
			t.Errorf("host A's stream past its share: %v, want ResourceExhausted naming MaxStreamMemoryPerHost", err)
		}
		if got := homagrpc.StreamMemoryForTest(w.srv); got > budget/4 {
			t.Errorf("host A's streams hold %d bytes, over its share of %d", got, budget/4)
		}
		if st := w.srv.Stats(); st.OverMemoryPerHost != 1 || st.OverMemory != 0 {
			t.Errorf("stats count %d streams failed at their host's share of memory and %d at the server's, want 1 and 0", st.OverMemoryPerHost, st.OverMemory)
		}
		fill(ctx, w.clientAt(t, otherHost))
		if got := homagrpc.StreamMemoryForTest(w.srv); got < held+window-size {
			t.Errorf("with host B's stream the streams hold %d bytes, want host A's %d and about B's window %d more", got, held, window)
		}
		cancel()
		synctest.Wait()
		if got := homagrpc.StreamMemoryForTest(w.srv); got != 0 {
			t.Errorf("%d bytes still held after the streams ended", got)
		}
		if n := homagrpc.HostSharesForTest(w.srv); n != 0 {
			t.Errorf("the server keeps the shares of %d hosts after their streams ended", n)
		}
	})
}
