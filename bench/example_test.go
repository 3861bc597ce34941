package bench_test

import (
	"context"
	"fmt"
	"io"

	"github.com/homa-go/homa/bench"
)

// A latency run of Go TCP with its server in this process, on
// 127.0.0.1: 100 RPCs of 100 bytes, one at a time.
func ExampleRun() {
	tcp, _ := bench.LookupProtocol("tcp")
	cfg := &bench.Config{
		Mode:      bench.Latency,
		Protocols: []bench.Protocol{tcp},
		InProcess: true,
		Size:      100,
		Count:     100,
	}
	rep, err := bench.Run(context.Background(), cfg, io.Discard)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range rep.Results {
		fmt.Printf("%s: %d RPCs, %d failed, %d size bucket\n", r.Protocol, r.Count, r.Failed, len(r.Buckets))
	}
	// Output: tcp: 100 RPCs, 0 failed, 1 size bucket
}
