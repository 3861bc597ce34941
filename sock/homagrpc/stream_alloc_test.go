package homagrpc_test

import (
	"net/netip"
	"runtime"
	"sync"
	"testing"

	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/internal/testkit/socktest"
	"github.com/homa-go/homa/sock/homagrpc"
)

// TestStreamMessageAllocs: a 1 KB message echoed on a stream costs the
// process (client and server) no more than a few copies of itself in
// new memory. The frames each message travels in come from the engine's
// pool and go back to it (sock.NewBuffer); what is left is gRPC's own
// decoding of each message (a copy of its body on each side) and small
// bookkeeping. Frames made with make cost 7.6 KB a message.
func TestStreamMessageAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts need a few thousand messages")
	}
	nw := memnet.New(memnet.Config{})
	defer nw.Close()
	ss, err := socktest.OpenMem(nw, netip.MustParseAddrPort("10.0.0.1:4000"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	srv := homagrpc.NewServer()
	testpb.RegisterTestServiceServer(srv, benchService{})
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(ss) })
	defer func() { srv.Stop(); wg.Wait() }()
	cs, err := socktest.OpenMem(nw, netip.MustParseAddrPort("10.0.0.2:0"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	cc := homagrpc.NewClientConn(cs, ss.LocalAddr())
	defer cc.Close()
	c := testpb.NewTestServiceClient(cc)

	run := func(perStream int) {
		var sw sync.WaitGroup
		errs := make(chan error, parallelStreams)
		for range parallelStreams {
			sw.Go(func() {
				if _, err := streamEcho(c, perStream, false); err != nil {
					errs <- err
				}
			})
		}
		sw.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	run(20) // warm the pools
	const perStream = 100
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	run(perStream)
	runtime.ReadMemStats(&after)
	msgs := parallelStreams * perStream
	per := float64(after.TotalAlloc-before.TotalAlloc) / float64(msgs)
	t.Logf("%.0f bytes allocated per %d-byte message echoed (%d messages)", per, streamMsgSize, msgs)
	if limit := 4.5 * streamMsgSize; per > limit {
		t.Errorf("%.0f bytes allocated per message, want at most %.0f", per, limit)
	}
}
