package homa_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/netio"
)

// BenchmarkRawFanoutRPC opens `clients` raw client Endpoints in this
// process beside an echo server, has each of them make one 100-byte RPC
// at once (failed counts those that end in an error), then measures one
// more client's RPCs, one at a time, with the others open and idle: the
// median round trip. Every protocol 146 socket of the host costs every
// Homa packet a clone in the kernel (see netio.OpenRaw).
//
//	go test -run '^$' -bench RawFanoutRPC -benchtime 2000x ./homa
func BenchmarkRawFanoutRPC(b *testing.B) {
	for _, clients := range []int{0, 100, 1000} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			addr := netip.MustParseAddr("127.0.0.1")
			open := func(port uint16) *homa.Endpoint {
				c, err := netio.OpenRaw(addr, port, nil)
				if errors.Is(err, netio.ErrPermission) {
					b.Skip(err)
				}
				if err != nil {
					b.Fatal(err)
				}
				return homa.NewEndpoint(c, homa.Config{})
			}
			server := open(23002)
			var others []*homa.Endpoint
			for range clients {
				others = append(others, open(0))
			}
			p := startPair(b, server, open(0))
			b.Cleanup(func() {
				for _, e := range others {
					e.Close()
				}
			})
			req := make([]byte, 100)
			var failed atomic.Int64
			var wg sync.WaitGroup
			for _, e := range others {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					id, err := e.Send(p.dst, req, 0)
					if err == nil {
						var m interface{ Release() }
						if m, err = e.Recv(ctx, id); err == nil {
							m.Release()
						}
					}
					if err != nil {
						failed.Add(1)
					}
				})
			}
			wg.Wait()
			const maxSamples = 1 << 16
			samples := make([]time.Duration, 0, maxSamples)
			ctx := context.Background()
			for b.Loop() {
				t0 := time.Now()
				id, err := p.client.Send(p.dst, req, 0)
				if err != nil {
					b.Fatal(err)
				}
				m, err := p.client.Recv(ctx, id)
				if err != nil {
					b.Fatal(err)
				}
				m.Release()
				if len(samples) < maxSamples {
					samples = append(samples, time.Since(t0))
				}
			}
			slices.Sort(samples)
			b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds())/1e3, "median-µs")
			b.ReportMetric(float64(failed.Load()), "failed")
		})
	}
}
