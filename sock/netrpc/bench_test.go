package netrpc_test

import (
	"errors"
	"net/rpc"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/homa-go/homa/internal/testkit/rpctcp"
	"github.com/homa-go/homa/internal/testkit/socktest"
	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/netrpc"
)

// BenchmarkCall measures the round trip of one net/rpc call at a time
// (Arith.Multiply, a few bytes each way) from the same client code over
// Homa (see socktest.BenchConfigs; raw IP only when the process may) and over
// net/rpc's own gob codec on a TCP loopback connection, in one run, and
// reports the median and 99th percentile.
//
//	go test -run '^$' -bench 'Call$' -benchtime 20000x ./sock/netrpc
func BenchmarkCall(b *testing.B) {
	for _, tc := range socktest.BenchConfigs {
		b.Run(tc.Name, func(b *testing.B) {
			c, stop, err := startHoma(&tc.Cfg)
			if errors.Is(err, sock.ErrPermission) {
				b.Skipf("skipping: %v", err)
			}
			if err != nil {
				b.Fatal(err)
			}
			defer stop()
			benchCalls(b, c)
		})
	}
	b.Run("tcp", func(b *testing.B) {
		c, stop := startTCP(b)
		defer stop()
		benchCalls(b, c)
	})
}

// BenchmarkEcho8MB measures one call at a time of Arith.Echo with
// 8,000,000 bytes each way (several Homa messages each way over Homa)
// over the configurations of BenchmarkCall and over net/rpc on TCP
// loopback, in one run, and reports the median and 99th percentile.
//
//	go test -run '^$' -bench Echo8MB -benchtime 40x ./sock/netrpc
func BenchmarkEcho8MB(b *testing.B) {
	in := make([]byte, 8_000_000)
	for i := range in {
		in[i] = byte(i)
	}
	run := func(b *testing.B, c *rpc.Client) {
		var out []byte
		if err := c.Call("Arith.Echo", in, &out); err != nil || len(out) != len(in) {
			b.Fatalf("Echo of %d bytes: %d back, %v", len(in), len(out), err)
		}
		rtts := make([]time.Duration, 0, b.N)
		b.SetBytes(int64(2 * len(in)))
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			out = out[:0]
			start := time.Now()
			err := c.Call("Arith.Echo", in, &out)
			rtts = append(rtts, time.Since(start))
			if err != nil || len(out) != len(in) {
				b.Fatalf("Echo of %d bytes: %d back, %v", len(in), len(out), err)
			}
		}
		b.StopTimer()
		reportLatency(b, rtts)
	}
	for _, tc := range socktest.BenchConfigs {
		b.Run(tc.Name, func(b *testing.B) {
			c, stop, err := startHoma(&tc.Cfg)
			if errors.Is(err, sock.ErrPermission) {
				b.Skipf("skipping: %v", err)
			}
			if err != nil {
				b.Fatal(err)
			}
			defer stop()
			run(b, c)
		})
	}
	b.Run("tcp", func(b *testing.B) {
		c, stop := startTCP(b)
		defer stop()
		run(b, c)
	})
}

// BenchmarkCallInterleaved makes the calls of BenchmarkCall over every
// transport in turn, 100 at a time, so that all of them meet the same
// load from the rest of the machine, and reports each one's median and
// 99th percentile, and how many times longer the median over TCP is than
// each median over Homa (speedup-*).
//
//	go test -run '^$' -bench CallInterleaved -benchtime 20000x ./sock/netrpc
func BenchmarkCallInterleaved(b *testing.B) {
	type proto struct {
		name string
		c    *rpc.Client
		rtts []time.Duration
	}
	var protos []*proto
	for _, tc := range socktest.BenchConfigs {
		c, stop, err := startHoma(&tc.Cfg)
		if err != nil {
			b.Logf("leaving out %s: %v", tc.Name, err)
			continue
		}
		defer stop()
		protos = append(protos, &proto{name: tc.Name, c: c})
	}
	c, stop := startTCP(b)
	defer stop()
	tcp := &proto{name: "tcp", c: c}
	protos = append(protos, tcp)

	timed := func(p *proto, i int) time.Duration {
		var r int
		start := time.Now()
		err := p.c.Call("Arith.Multiply", &Args{i, 3}, &r)
		d := time.Since(start)
		if err != nil || r != 3*i {
			b.Fatalf("%s: Multiply(%d, 3) = %d, %v", p.name, i, r, err)
		}
		return d
	}
	for _, p := range protos {
		for i := range 500 {
			timed(p, i)
		}
		p.rtts = make([]time.Duration, 0, b.N)
	}
	const block = 100
	b.ResetTimer()
	for done := 0; done < b.N; done += block {
		for _, p := range protos {
			for i := range min(block, b.N-done) {
				p.rtts = append(p.rtts, timed(p, done+i))
			}
		}
	}
	b.StopTimer()
	us := func(p *proto, q float64) float64 {
		return float64(p.rtts[int(q*float64(len(p.rtts)-1))]) / float64(time.Microsecond)
	}
	for _, p := range protos {
		slices.Sort(p.rtts)
		b.ReportMetric(us(p, 0.5), p.name+"-p50-µs")
		b.ReportMetric(us(p, 0.99), p.name+"-p99-µs")
	}
	for _, p := range protos[:len(protos)-1] {
		b.ReportMetric(us(tcp, 0.5)/us(p, 0.5), "speedup-"+p.name)
	}
}

// startHoma serves Arith with Serve on loopback and returns a client of
// it and the function that stops both.
func startHoma(cfg *sock.Config) (*rpc.Client, func(), error) {
	s, err := socktest.OpenFree("127.0.0.1", 27450, cfg)
	if err != nil {
		return nil, nil, err
	}
	srv := rpc.NewServer()
	if err := srv.Register(new(Arith)); err != nil {
		s.Close()
		return nil, nil, err
	}
	var wg sync.WaitGroup
	wg.Go(func() { netrpc.Serve(srv, s) })
	c, err := netrpc.Dial(s.LocalAddr(), cfg)
	if err != nil {
		s.Close()
		wg.Wait()
		return nil, nil, err
	}
	return c, func() { c.Close(); s.Close(); wg.Wait() }, nil
}

// startTCP serves Arith with net/rpc on a TCP loopback listener and
// returns a client of it and the function that stops both.
func startTCP(b *testing.B) (*rpc.Client, func()) {
	c, stop, err := rpctcp.Start(new(Arith))
	if err != nil {
		b.Fatal(err)
	}
	return c, stop
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
