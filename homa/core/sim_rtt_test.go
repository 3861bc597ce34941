package core_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/sim"
)

// TestSimLongRTT: across a path with a 20 ms one-way delay, far longer
// than the configured resend timing, the core learns the round trip from
// the first RPC and then sends no RESEND, takes no grant back and asks
// for few acknowledgments while data flows: 1 MB requests and responses
// cross, one after another and several at once.
func TestSimLongRTT(t *testing.T) {
	n := sim.New(sim.Config{Seed: 1, Delay: 20 * time.Millisecond})
	srv := n.Listen(serverAP, core.Config{})
	echo(srv, n, 0, nil)
	cli := n.Listen(clientAP, core.Config{})
	got := collect(cli)

	call := func(name uint64, size, parallel int) {
		t.Helper()
		want := map[uint64][]byte{}
		for i := range parallel {
			req := request(name+uint64(i), size)
			want[send(t, cli, serverAP, req)] = req
		}
		if !n.RunUntil(func() bool { return len(got) == len(want) }, 10*time.Second) {
			t.Fatalf("%d of %d RPCs of %d bytes done after 10 s", len(got), len(want), size)
		}
		for id, req := range want {
			if m := got[id]; m.Err != nil || !bytes.Equal(m.Data, req) {
				t.Fatalf("RPC of %d bytes: %v, %d bytes back", size, m.Err, len(m.Data))
			}
		}
		clear(got)
	}
	call(0, 1_000_000, 1) // learns the round trip
	cs, ss := cli.Core.Stats(), srv.Core.Stats()
	t.Logf("first RPC: client %d RESENDs, server %d RESENDs, %d NEED_ACKs, %d grants revoked",
		cs.ResendsSent, ss.ResendsSent, ss.NeedAcksSent, ss.GrantsRevoked)

	start := n.Now()
	for i := range 4 {
		call(uint64(10+i), 1_000_000, 1)
	}
	call(200, 100, 8)
	c2, s2 := cli.Core.Stats(), srv.Core.Stats()
	if r := c2.ResendsSent - cs.ResendsSent + s2.ResendsSent - ss.ResendsSent; r != 0 {
		t.Errorf("%d RESENDs while data flowed (client %d, server %d)", r, c2.ResendsSent-cs.ResendsSent, s2.ResendsSent-ss.ResendsSent)
	}
	if r := c2.GrantsRevoked + s2.GrantsRevoked - cs.GrantsRevoked - ss.GrantsRevoked; r != 0 {
		t.Errorf("%d grants revoked from senders whose bytes were on the way", r)
	}
	if na, rpcs := s2.NeedAcksSent-ss.NeedAcksSent, uint64(4+8); na > rpcs {
		t.Errorf("%d NEED_ACKs for %d RPCs", na, rpcs)
	}
	t.Logf("one at a time: 12 RPCs in %v, %d NEED_ACKs", n.Now()-start, s2.NeedAcksSent-ss.NeedAcksSent)

	// Four at once: the requests waiting for their turn in the server's
	// SRPT order are kept alive by their clients' RESENDs (answered
	// with a GRANT), one per round trip; nothing is sent twice.
	call(100, 1_000_000, 4)
	c3, s3 := cli.Core.Stats(), srv.Core.Stats()
	if r := c3.Retransmits + s3.Retransmits - c2.Retransmits - s2.Retransmits; r != 0 {
		t.Errorf("%d retransmissions while data flowed", r)
	}
	if r := c3.GrantsRevoked + s3.GrantsRevoked - c2.GrantsRevoked - s2.GrantsRevoked; r != 0 {
		t.Errorf("%d grants revoked from senders whose bytes were on the way", r)
	}
	t.Logf("four at once: %d keep-alive RESENDs", c3.ResendsSent+s3.ResendsSent-c2.ResendsSent-s2.ResendsSent)
}

// TestSimLongRTTLoss: with the timers stretched to a 40 ms round trip
// (and jitter that makes the samples vary), loss is still recovered:
// every RPC completes with its own bytes and runs once.
func TestSimLongRTTLoss(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			lossRun(t, sim.Config{Seed: seed, Delay: 20 * time.Millisecond, Jitter: 2 * time.Millisecond, Loss: 0.05, Duplicate: 0.02}, 100)
		})
	}
}
