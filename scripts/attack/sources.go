package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/sock"
)

// sources is scenario (b): claims from many forged sources while a real
// client on another address makes 100-byte RPCs, before the flood and
// for as long as it lasts; every one must succeed.
func sources(ctx context.Context, o *options) result {
	res := result{
		name:  fmt.Sprintf("b. %d sources x %d claims, real client beside", o.sources, o.perSource),
		bound: "every real RPC succeeds",
	}
	r, err := openRig(ctx, o, false)
	if err != nil {
		return res.failed(err)
	}
	defer r.close()
	cli, err := openClient("127.0.0.2")
	if err != nil {
		return res.failed(err)
	}
	defer cli.Close()
	before := call(ctx, cli, r.srv.addr, o.rpcs, nil)
	m0, err := r.srv.scrape(ctx)
	if err != nil {
		return res.failed(err)
	}
	done := make(chan struct{})
	var ferr error
	go func() {
		defer close(done)
		ferr = flood(ctx, r.snd, r.srv.addr, blockSources, o.sources, o.perSource, o.rate)
	}()
	during := call(ctx, cli, r.srv.addr, 1, done)
	<-done
	cs := cli.Stats()
	sent := o.sources * o.perSource
	m, err := r.srv.settle(ctx, m0.get("homa_packets_received_total", `type="data"`)+float64(sent+during.sent), settleTime)
	if err := errors.Join(ferr, err, r.srv.alive()); err != nil {
		return res.failed(err)
	}
	got := m.get("homa_packets_received_total", `type="data"`) - m0.get("homa_packets_received_total", `type="data"`) - float64(during.sent)
	res.figures = map[string]float64{"received": got, "failed": float64(before.failed + during.failed)}
	res.measured = fmt.Sprintf("%d sent, %.0f claims received; RPCs before: %v; during: %v (the client sent %d RESENDs, "+
		"dropped %d responses that came after it gave up); peers %.0f; drops: %s; %s",
		sent, got, before, during, cs.ResendsSent, cs.Drops[contract.DropUnknownRPC], m.get("homa_peers"),
		m.byLabel("homa_packets_dropped_total", "reason"), r.aftermath(m0, m))
	if f := append(before.failures, during.failures...); len(f) > 0 {
		res.measured += "; failures: " + strings.Join(f, "; ")
	}
	ok := landed(got, sent)
	if !ok {
		res.measured += "; too few claims reached the server to judge"
	}
	res.pass = ok && before.failed == 0 && during.failed == 0 && len(during.times) > 0
	return res
}

// landed says whether enough of a flood reached the server for its
// bounds to mean something: at least half its packets.
func landed(received float64, sent int) bool { return received >= float64(sent)/2 }

// latencies are the round trips of a run of RPCs and its failures.
type latencies struct {
	times    []time.Duration
	sent     int      // RPCs begun
	failed   int      // RPCs that failed
	failures []string // the first few: which RPC, when, why
}

// fail counts a failed RPC, the i-th (from 0), at elapsed into the run.
func (l *latencies) fail(i int, elapsed time.Duration, err error) {
	l.failed++
	if len(l.failures) < 3 {
		l.failures = append(l.failures, fmt.Sprintf("RPC %d at %v: %v", i+1, elapsed.Round(time.Millisecond), err))
	}
}

func (l *latencies) String() string {
	if len(l.times) == 0 {
		return fmt.Sprintf("0 ok, %d failed", l.failed)
	}
	s := slices.Clone(l.times)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return fmt.Sprintf("%d ok, %d failed, median %v, p99 %v", len(s), l.failed,
		q(0.5).Round(time.Microsecond), q(0.99).Round(time.Microsecond))
}

// call makes RPCs of 100 bytes to dst, one at a time: count of them, and
// then more until done is closed (nil: none).
func call(ctx context.Context, cli *sock.Socket, dst netip.AddrPort, count int, done <-chan struct{}) *latencies {
	l := &latencies{}
	req := make([]byte, 100)
	begin := time.Now()
	for i := 0; ; i++ {
		if i >= count {
			if done == nil {
				return l
			}
			select {
			case <-done:
				return l
			default:
			}
		}
		if ctx.Err() != nil {
			l.fail(i, time.Since(begin), ctx.Err())
			return l
		}
		cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		start := time.Now()
		l.sent++
		resp, err := cli.Call(cctx, dst, req)
		cancel()
		if err != nil {
			l.fail(i, time.Since(begin), err)
			continue
		}
		l.times = append(l.times, time.Since(start))
		if len(resp.Data) != len(req) {
			l.fail(i, time.Since(begin), fmt.Errorf("echo of %d bytes came back with %d", len(req), len(resp.Data)))
		}
		resp.Release()
	}
}

// openClient opens a real Homa client (raw IP) on a client port of addr,
// in this process.
func openClient(addr string) (*sock.Socket, error) {
	return sock.Open(netip.MustParseAddrPort(addr+":0"), &sock.Config{Transport: sock.Raw})
}
