package homagrpc_test

import (
	"runtime"
	"sync"
	"testing"

	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/homa-go/homa/homa/memnet"
)

// TestStreamMessageAllocs: a 1 KB message echoed on a stream costs the
// process (client and server) no more than a few copies of itself in
// new memory. The frames each message travels in come from the engine's
// pool and go back to it (sock.NewBuffer); what is left is gRPC's own
// decoding of each message (a copy of its body on each side) and small
// bookkeeping. Frames made with make cost 7.6 KB a message.
func TestStreamMessageAllocs(t *testing.T) {
	w := serveMem(t, memnet.Config{}, func(r grpc.ServiceRegistrar) { testpb.RegisterTestServiceServer(r, benchService{}) })
	defer w.close(t)
	c := w.client(t)

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
