package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// peerTable is the server's peer table size: the engine's default
// (Limits.Peers); homa serve has no flag to change it.
const peerTable = 16_384

// peers is scenario (d): one forged claim from each of many sources,
// more than the peer table holds, so that the server evicts peers; then
// a real client from a new address must have every call answered.
func peers(ctx context.Context, o *options) result {
	res := result{
		name:  fmt.Sprintf("d. %d sources, one claim each; then a new client", o.peers),
		bound: "the flood fills the peer table and evicts; every call of the new real client is answered",
	}
	if o.peers <= peerTable {
		return res.failed(fmt.Errorf("%d sources cannot overflow a peer table of %d", o.peers, peerTable))
	}
	r, err := openRig(ctx, o, false)
	if err != nil {
		return res.failed(err)
	}
	defer r.close()
	m0, err := r.srv.scrape(ctx)
	if err != nil {
		return res.failed(err)
	}
	ferr := flood(ctx, r.snd, r.srv.addr, blockPeers, o.peers, 1, o.rate)
	if err := errors.Join(ferr, r.srv.alive()); err != nil {
		return res.failed(err)
	}
	// At once, while the forged RPCs still hold their peers.
	end, err := r.srv.scrape(ctx)
	if err != nil {
		return res.failed(err)
	}
	cli, err := openClient("127.0.0.3")
	if err != nil {
		return res.failed(err)
	}
	defer cli.Close()
	start := time.Now()
	after := call(ctx, cli, r.srv.addr, o.rpcs, nil)
	took := time.Since(start)
	m, err := r.srv.settle(ctx, float64(o.peers+after.sent), settleTime)
	if err := errors.Join(err, r.srv.alive()); err != nil {
		return res.failed(err)
	}
	got := m.get("homa_packets_received_total", `type="data"`) - float64(after.sent)
	res.figures = map[string]float64{"received": got, "answered": float64(len(after.times)), "failed": float64(after.failed)}
	res.measured = fmt.Sprintf("%d sent, %.0f received; at the end of the flood peers %.0f, evicted %.0f, incoming RPCs %.0f; "+
		"then the new client at once: %v (%v in all); at last peers %.0f, evicted %.0f; drops: %s; %s",
		o.peers, got, end.get("homa_peers"), end.get("homa_peers_evicted_total"), end.get("homa_incoming_server_rpcs"),
		after, took.Round(time.Millisecond), m.get("homa_peers"), m.get("homa_peers_evicted_total"),
		m.byLabel("homa_packets_dropped_total", "reason"), r.aftermath(m0, m))
	if len(after.failures) > 0 {
		res.measured += "; failures: " + strings.Join(after.failures, "; ")
	}
	// The flood must have overflowed the table (peers evicted by the
	// end of it, the table full), and no call of the client may fail.
	evicted := end.get("homa_peers_evicted_total") > 0 && end.get("homa_peers") == peerTable
	if !evicted {
		res.measured += "; the flood did not overflow the peer table"
	}
	answered := after.failed == 0 && len(after.times) == o.rpcs
	if !answered {
		res.measured += fmt.Sprintf("; %d of the client's %d calls answered", len(after.times), o.rpcs)
	}
	res.pass = evicted && answered
	return res
}
