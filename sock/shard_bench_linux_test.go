package sock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/homa-go/homa/homa/wire"
)

// BenchmarkShardsThroughput is the rate of small RPCs into a server
// socket of one or two shards: 4 client sockets, 32 RPCs of 100 bytes
// in flight each, 4 server goroutines (as homa bench --mode throughput
// --size 100 --clients 4 --outstanding 32, in one process). b.N is the
// number of RPCs.
func BenchmarkShardsThroughput(b *testing.B) {
	for _, tr := range []Transport{UDP, Raw} {
		for _, n := range []int{1, 2} {
			b.Run(fmt.Sprintf("%v/shards=%d", tr, n), func(b *testing.B) {
				benchShards(b, tr, n, 100, 32)
			})
		}
	}
}

// BenchmarkShardsLarge is the same with messages of 500,000 bytes, 2 in
// flight from each client: requests that need grants, from the shards'
// shared incoming budget when there are two.
func BenchmarkShardsLarge(b *testing.B) {
	for _, n := range []int{1, 2} {
		b.Run(fmt.Sprintf("shards=%d", n), func(b *testing.B) {
			benchShards(b, UDP, n, 500_000, 2)
		})
	}
}

func benchShards(b *testing.B, tr Transport, n, size, outstanding int) {
	const clients, workers = 4, 4
	var srv *Socket
	var err error
	for port := uint16(24000); port < 24100; port++ {
		if srv, err = Open(netip.AddrPortFrom(loopback, port), &Config{Transport: tr, Backend: Engine, Shards: n}); err == nil {
			break
		}
	}
	if errors.Is(err, ErrPermission) {
		b.Skipf("skipping: raw sockets need CAP_NET_RAW: %v", err)
	}
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				m, err := srv.Recv(context.Background(), Any)
				if err != nil {
					return
				}
				_ = srv.Reply(m, m.Data)
				m.Release()
			}
		})
	}
	defer func() {
		srv.Close()
		wg.Wait()
	}()
	var cs []*Socket
	for range clients {
		c, err := Open(netip.AddrPortFrom(loopback, 0), &Config{Transport: tr, Backend: Engine})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		cs = append(cs, c)
	}
	req := make([]byte, size)
	per := max(b.N/clients, outstanding)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var cw sync.WaitGroup
	errs := make(chan error, clients)
	for _, c := range cs {
		cw.Go(func() {
			sent, done := 0, 0
			for ; sent < outstanding; sent++ {
				if _, err := c.Send(srv.LocalAddr(), req, 0); err != nil {
					errs <- err
					return
				}
			}
			for done < per {
				m, err := c.Recv(ctx, Any)
				if err != nil || m.Err != nil {
					errs <- fmt.Errorf("recv: %v %v", err, m)
					return
				}
				m.Release()
				done++
				if sent < per {
					sent++
					if _, err := c.Send(srv.LocalAddr(), req, 0); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	cw.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	b.ReportMetric(float64(per*clients)/elapsed.Seconds(), "RPCs/s")
	if g, ok := srv.b.(*shards); ok {
		var swept, helped, kicked uint64
		for k := range g.slots {
			swept += g.slots[k].swept.Load()
			helped += g.slots[k].helped.Load()
			kicked += g.slots[k].kicked.Load()
		}
		rpcs := float64(per * clients)
		b.ReportMetric(float64(swept)/rpcs, "sweeps/RPC")
		b.ReportMetric(float64(helped)/rpcs, "helpers/RPC")
		b.ReportMetric(float64(kicked)/rpcs, "kicks/RPC")
	}
}

// TestShardsServe is a server for measurements, not a test: with
// HOMA_SHARDS_SERVE=ADDR:PORT/SHARDS it serves echo on a UDP socket of
// that many shards (raw IP with HOMA_SHARDS_SERVE_TRANSPORT=raw), with 4 goroutines in Recv(Any) as homa serve has,
// for HOMA_SHARDS_SERVE_FOR (default 1m) or until SIGTERM, so that homa bench --target
// measures it from another process (see docs/design.md, "Sharding").
// Without the variable it skips.
func TestShardsServe(t *testing.T) {
	spec := os.Getenv("HOMA_SHARDS_SERVE")
	if spec == "" {
		t.Skip("set HOMA_SHARDS_SERVE=ADDR:PORT/SHARDS to serve")
	}
	addr, count, ok := strings.Cut(spec, "/")
	n, err := strconv.Atoi(count)
	if !ok || err != nil {
		t.Fatalf("HOMA_SHARDS_SERVE=%q: want ADDR:PORT/SHARDS", spec)
	}
	d, err := time.ParseDuration(cmp.Or(os.Getenv("HOMA_SHARDS_SERVE_FOR"), "1m"))
	if err != nil {
		t.Fatal(err)
	}
	tr := UDP
	if os.Getenv("HOMA_SHARDS_SERVE_TRANSPORT") == "raw" {
		tr = Raw
	}
	s, err := Open(netip.MustParseAddrPort(addr), &Config{Transport: tr, Backend: Engine, Shards: n})
	if err != nil {
		t.Fatal(err)
	}
	echo(t, s, 4)
	var before, after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	if g, ok := s.b.(*shards); ok {
		st := s.Stats()
		var swept, helped, kicked uint64
		for k := range g.slots {
			swept += g.slots[k].swept.Load()
			helped += g.slots[k].helped.Load()
			kicked += g.slots[k].kicked.Load()
		}
		t.Logf("%d requests; Recv(Any): %d sweeps, %d helpers, %d kicks", st.RequestsReceived, swept, helped, kicked)
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	st := s.Stats()
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	t.Logf("server CPU %v, %.1f µs a request", cpu, float64(cpu.Microseconds())/float64(max(st.RequestsReceived, 1)))
	t.Logf("drops %v, RESENDs sent %d, retransmits %d, ignored %d, RPC_UNKNOWN rx %d, timer wakeups %d",
		st.Drops, st.ResendsSent, st.Retransmits, st.ResendsIgnored, st.RxPackets[wire.TypeRPCUnknown], st.TimerWakeups)
}
