package bench_test

import (
	"bytes"
	"context"
	"math"
	"testing"
	"time"

	"github.com/homa-go/homa/bench"
)

// TestErpcLargeMessages: the erpc protocols carry requests longer than
// one Homa message (as erpc's large messages, in fragments), one at a
// time and many in flight, and their replies come back whole (the run
// checks every reply's bytes); the report's sizes are the requests'.
func TestErpcLargeMessages(t *testing.T) {
	const size = 4_000_000
	p, _ := bench.LookupProtocol("erpc-udp")
	for _, cfg := range []*bench.Config{
		{Mode: bench.Latency, Count: 6, Warmup: 1},
		{Mode: bench.Throughput, Count: 12, Clients: 2, Outstanding: 3, Calibrate: 2, Warmup: 1},
	} {
		t.Run(cfg.Mode, func(t *testing.T) {
			cfg.Protocols, cfg.InProcess, cfg.Size = []bench.Protocol{p}, true, size
			cfg.Timeout = time.Minute
			var stderr bytes.Buffer
			rep, err := bench.Run(context.Background(), cfg, &stderr)
			if err != nil {
				t.Fatalf("%v\n%s", err, stderr.String())
			}
			if len(rep.Results) != 1 {
				t.Fatalf("%d rows, skipped %v\n%s", len(rep.Results), rep.Skipped, stderr.String())
			}
			r := rep.Results[0]
			if r.Count != cfg.Count || r.Failed != 0 {
				t.Fatalf("%d RPCs measured, %d failed; want %d, 0", r.Count, r.Failed, cfg.Count)
			}
			// Gbit/s is request payload per second: size bytes per RPC.
			if got := r.Gbps * 1e9 / 8 / r.RPCsPerSec; math.Abs(got-size) > size/100 {
				t.Fatalf("%.0f bytes per RPC reported, want %d", got, size)
			}
			if len(r.Buckets) != 1 || r.Buckets[0].MaxSize != size {
				t.Fatalf("buckets %+v, want one of %d bytes", r.Buckets, size)
			}
		})
	}
}
