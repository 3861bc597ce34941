package main

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// claims is scenario (a): n forged 1 MB claims from one source. The
// server's resident memory may grow by less than rssBound over its
// baseline, and its receive memory may not pass the host's share.
func claims(ctx context.Context, o *options, n int) result {
	res := result{
		name:  fmt.Sprintf("a. %d claims of 1 MB, one source", n),
		bound: fmt.Sprintf("RSS peak - baseline < %d MiB; receive memory <= %d MiB (the host's share)", rssBound>>20, perPeerShare>>20),
	}
	r, err := openRig(ctx, o, false)
	if err != nil {
		return res.failed(err)
	}
	defer r.close()
	base, err := r.srv.memory()
	if err != nil {
		return res.failed(err)
	}
	m0, err := r.srv.scrape(ctx)
	if err != nil {
		return res.failed(err)
	}
	w := watchMemory(ctx, r.srv)
	ferr := flood(ctx, r.snd, r.srv.addr, blockClaims, 1, n, o.rate)
	m, serr := r.srv.settle(ctx, float64(n), settleTime)
	recvMax, werr := w.stop()
	if err := errors.Join(ferr, serr, werr, r.srv.alive()); err != nil {
		return res.failed(err)
	}
	recvMax = max(recvMax, m.get("homa_receive_memory_bytes"))
	peak, err := r.srv.memory()
	if err != nil {
		return res.failed(err)
	}
	select {
	case <-ctx.Done():
		return res.failed(ctx.Err())
	case <-time.After(o.after):
	}
	later, err := r.srv.memory()
	if err != nil {
		return res.failed(err)
	}
	m2, err := r.srv.scrape(ctx)
	if err != nil {
		return res.failed(err)
	}
	got := m.get("homa_packets_received_total", `type="data"`)
	grew := peak.Peak - base.RSS
	res.figures = map[string]float64{"received": got, "grew": float64(grew), "recv": recvMax}
	res.measured = fmt.Sprintf("%d sent, %.0f received; RSS %s before, peak %s, %s %v after (Go heap in use %s); "+
		"receive memory peak %s, %s after; incoming RPCs %.0f, %.0f after; shed %.0f; drops: %s; %s",
		n, got, mib(base.RSS), mib(peak.Peak), mib(later.RSS), o.after, mib(int64(m2.get("go_memstats_heap_inuse_bytes"))),
		mib(int64(recvMax)), mib(int64(m2.get("homa_receive_memory_bytes"))), m.get("homa_incoming_server_rpcs"), m2.get("homa_incoming_server_rpcs"),
		m.get("homa_messages_shed_total"), m.byLabel("homa_packets_dropped_total", "reason"), r.aftermath(m0, m2))
	ok := landed(got, n)
	if !ok {
		res.measured += "; too few claims reached the server to judge"
	}
	res.pass = ok && grew < rssBound && recvMax <= perPeerShare
	return res
}
