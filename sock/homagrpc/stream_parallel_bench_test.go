package homagrpc_test

import (
	"sync"
	"testing"

	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/homa-go/homa/internal/testkit/socktest"
)

// parallelStreams is how many streams BenchmarkStreamParallel runs at
// once on one client connection, as homa bench's throughput mode does
// per client.
const parallelStreams = 32

// BenchmarkStreamParallel measures 1 KB messages echoed on
// parallelStreams bidirectional streams of one client connection at
// once, each stream one message at a time (ping-pong), over Homa (the
// transports of socktest.BenchConfigs the process may open) and over
// grpc-go on one TCP loopback connection: b.N messages in all, per
// transport. It reports messages per second and, over Homa, Homa RPCs
// per message.
//
//	go test -run '^$' -bench StreamParallel -benchtime 20000x ./sock/homagrpc
func BenchmarkStreamParallel(b *testing.B) {
	for _, tc := range socktest.BenchConfigs {
		b.Run(tc.Name, func(b *testing.B) {
			c, cs, stop, err := startBenchHoma(b, &tc.Cfg, 27740)
			if err != nil {
				b.Skipf("%s: %v", tc.Name, err)
			}
			defer stop()
			before := cs.Stats().RPCsStarted
			parallelEcho(b, c)
			b.ReportMetric(float64(cs.Stats().RPCsStarted-before)/float64(b.N), "rpc/msg")
		})
	}
	b.Run("grpc-tcp", func(b *testing.B) {
		c, stop := startGRPC(b)
		defer stop()
		parallelEcho(b, c)
	})
}

// parallelEcho runs b.N ping-pong messages over parallelStreams streams
// at once and reports the rate.
func parallelEcho(b *testing.B, c testpb.TestServiceClient) {
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, parallelStreams)
	for i := range parallelStreams {
		n := b.N*(i+1)/parallelStreams - b.N*i/parallelStreams
		if n == 0 {
			continue
		}
		wg.Go(func() {
			if _, err := streamEcho(c, n, false); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
}
