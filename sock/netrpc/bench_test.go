package netrpc_test

import (
	"net"
	"net/rpc"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/netrpc"
)

// BenchmarkCall measures the round trip of one net/rpc call at a time
// (Arith.Multiply, a few bytes each way) from the same client code over
// Homa (UDP encapsulation, and raw IP when the process may; with the
// engine's default receive path, which busy-polls for 50 µs, and with
// polling off) and over net/rpc's own gob codec on a TCP loopback
// connection, in one run, and reports the median and 99th percentile.
//
//	go test -run '^$' -bench Call -benchtime 20000x ./sock/netrpc
func BenchmarkCall(b *testing.B) {
	for _, tc := range []struct {
		name string
		cfg  *sock.Config
	}{
		{"homa-udp", &sock.Config{Transport: sock.UDP}},
		{"homa-raw", &sock.Config{Transport: sock.Raw}},
		{"homa-udp-nopoll", &sock.Config{Transport: sock.UDP, Engine: homa.Config{PollDuration: -1}}},
		{"homa-raw-nopoll", &sock.Config{Transport: sock.Raw, Engine: homa.Config{PollDuration: -1}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := openServer(b, "127.0.0.1", 27450, tc.cfg)
			srv := rpc.NewServer()
			if err := srv.Register(new(Arith)); err != nil {
				b.Fatal(err)
			}
			var wg sync.WaitGroup
			wg.Go(func() { netrpc.Serve(srv, s) })
			defer func() { s.Close(); wg.Wait() }()
			c, err := netrpc.Dial(s.LocalAddr(), tc.cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			benchCalls(b, c)
		})
	}
	b.Run("tcp", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := rpc.NewServer()
		if err := srv.Register(new(Arith)); err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return // closed
				}
				wg.Go(func() { srv.ServeConn(conn) })
			}
		})
		defer func() { ln.Close(); wg.Wait() }()
		c, err := rpc.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		benchCalls(b, c)
	})
}

// benchCalls makes b.N calls one after another and reports the median
// and 99th percentile round trip.
func benchCalls(b *testing.B, c *rpc.Client) {
	for i := range 200 { // warm up
		var r int
		if err := c.Call("Arith.Multiply", &Args{i, 3}, &r); err != nil {
			b.Fatal(err)
		}
	}
	rtts := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		var r int
		start := time.Now()
		err := c.Call("Arith.Multiply", &Args{i, 3}, &r)
		rtts = append(rtts, time.Since(start))
		if err != nil || r != 3*i {
			b.Fatalf("Multiply(%d, 3) = %d, %v", i, r, err)
		}
	}
	b.StopTimer()
	reportLatency(b, rtts)
}

// reportLatency reports the median and 99th percentile of rtts in
// microseconds.
func reportLatency(b *testing.B, rtts []time.Duration) {
	if len(rtts) == 0 {
		return
	}
	slices.Sort(rtts)
	us := func(q float64) float64 {
		return float64(rtts[int(q*float64(len(rtts)-1))]) / float64(time.Microsecond)
	}
	b.ReportMetric(us(0.5), "p50-µs")
	b.ReportMetric(us(0.99), "p99-µs")
}
