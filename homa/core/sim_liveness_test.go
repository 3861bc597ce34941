package core_test

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/sim"
	"github.com/homa-go/homa/homa/wire"
)

// TestDeadPortThenSlowHandler: an RPC to a port where nothing listens
// times out; the next RPC to a live server on the same host, whose
// handler takes 50 ms (ten times the first RESEND's delay), succeeds:
// the dead port's silence is not held against the live one, and a server
// still working (it answers RESENDs with BUSY) is not dead.
func TestDeadPortThenSlowHandler(t *testing.T) {
	n := sim.New(sim.Config{Seed: 3})
	srv := n.Listen(serverAP, core.Config{})
	echo(srv, n, 50*time.Millisecond, nil)
	cli := n.Listen(clientAP, core.Config{})
	got := collect(cli)
	dead := send(t, cli, netip.AddrPortFrom(serverAP.Addr(), 999), request(1, 100))
	if !n.RunUntil(func() bool { return got[dead] != nil }, time.Second) {
		t.Fatal("RPC to a dead port never ended")
	}
	if err := got[dead].Err; !errors.Is(err, contract.ErrPeerTimeout) {
		t.Fatalf("RPC to a dead port: %v, want ErrPeerTimeout", err)
	}
	for _, size := range []int{100, 500_000} {
		live := send(t, cli, serverAP, request(2, size))
		if !n.RunUntil(func() bool { return got[live] != nil }, n.Now()+time.Second) {
			t.Fatalf("%d-byte RPC to the slow server never ended", size)
		}
		if err := got[live].Err; err != nil {
			t.Fatalf("%d-byte RPC to a live server with a 50 ms handler failed: %v", size, err)
		}
	}
	if st := srv.Core.Stats(); st.PeerTimeouts != 0 {
		t.Errorf("server timed out %d RPCs", st.PeerTimeouts)
	}
}

// TestNoListenerReported: where the network reports a port with no
// listener (ICMP port unreachable), the RPC fails at once with
// ErrNoListener, and RPCs to other ports of the host are untouched.
func TestNoListenerReported(t *testing.T) {
	n := sim.New(sim.Config{Seed: 4, ReportUnreachable: true})
	srv := n.Listen(serverAP, core.Config{})
	echo(srv, n, 10*time.Millisecond, nil)
	cli := n.Listen(clientAP, core.Config{})
	got := collect(cli)
	live := send(t, cli, serverAP, request(1, 100))
	dead := send(t, cli, netip.AddrPortFrom(serverAP.Addr(), 999), request(2, 100))
	if !n.RunUntil(func() bool { return got[dead] != nil }, time.Second) {
		t.Fatal("RPC to a dead port never ended")
	}
	var op *contract.OpError
	if err := got[dead].Err; !errors.Is(err, contract.ErrNoListener) || !errors.As(err, &op) || op.ID != dead {
		t.Fatalf("RPC to a dead port: %v, want an OpError for RPC %d with ErrNoListener", err, dead)
	}
	if n.Now() > time.Millisecond {
		t.Errorf("ErrNoListener after %v, want at once", n.Now())
	}
	if got[live] != nil {
		t.Fatalf("RPC to the live port ended early: %+v", got[live])
	}
	if !n.RunUntil(func() bool { return got[live] != nil }, time.Second) || got[live].Err != nil {
		t.Fatalf("RPC to the live port: %+v", got[live])
	}
}

// TestLivenessPerRPC: every packet of one RPC is lost while other RPCs
// with the same server flow. The server answers for the others, but says
// nothing about this one: it fails with ErrPeerTimeout in about the
// timeout, and no other RPC fails.
func TestLivenessPerRPC(t *testing.T) {
	var stuck uint64 // the RPC whose packets are all lost: its request is named 0
	n := sim.New(sim.Config{Seed: 5, Drop: func(_, _ netip.AddrPort, pkt []byte) bool {
		var p wire.Packet
		if p.Parse(pkt) != nil {
			return false
		}
		if p.Type == wire.TypeData && p.Data.SenderID&1 == 0 {
			return len(p.Data.Payload) >= 8 && string(p.Data.Payload[:8]) == string(request(0, 8))
		}
		return stuck != 0 && senderID(pkt)|1 == stuck|1
	}})
	srv := n.Listen(serverAP, core.Config{})
	echo(srv, n, 0, nil)
	cli := n.Listen(clientAP, core.Config{})
	got := collect(cli)
	stuck = send(t, cli, serverAP, request(0, 100))
	others := 0
	var tick func()
	tick = func() {
		if got[stuck] == nil {
			send(t, cli, serverAP, request(uint64(others+1), 100))
			others++
			n.After(time.Millisecond, tick)
		}
	}
	tick()
	if !n.RunUntil(func() bool { return got[stuck] != nil }, 2*time.Second) {
		t.Fatalf("an RPC whose peer says nothing about it never ended while other RPCs flowed: client %+v", cli.Core.Stats().ResendsSent)
	}
	if err := got[stuck].Err; !errors.Is(err, contract.ErrPeerTimeout) {
		t.Fatalf("stuck RPC: %v, want ErrPeerTimeout", err)
	}
	if at := n.Now(); at < 100*time.Millisecond || at > 150*time.Millisecond {
		t.Errorf("stuck RPC failed at %v, want about 105 ms (20 RESENDs 5 ms apart)", at)
	}
	n.Run(n.Now() + 10*time.Millisecond)
	for id, m := range got {
		if id != stuck && m.Err != nil {
			t.Errorf("RPC %d failed: %v", id, m.Err)
		}
	}
	if others < 50 {
		t.Fatalf("only %d other RPCs ran", others)
	}
}

// TestIdleCoreSleeps: once every RPC is done and acknowledged, a core has
// no deadline but the expiry of idle state (the server's records of
// finished ids, both sides' idle peers), a minute away, and once it has
// gone none at all: an idle endpoint needs no timer.
func TestIdleCoreSleeps(t *testing.T) {
	n := sim.New(sim.Config{Seed: 6})
	srv := n.Listen(serverAP, core.Config{})
	echo(srv, n, 0, nil)
	cli := n.Listen(clientAP, core.Config{})
	got := collect(cli)
	for i := range 20 {
		send(t, cli, serverAP, request(uint64(i), 1000*i+1))
	}
	if !n.RunUntil(func() bool { return len(got) == 20 }, time.Second) {
		t.Fatal("RPCs did not finish")
	}
	n.Run(n.Now() + time.Second)
	for _, e := range []*sim.Endpoint{srv, cli} {
		if at, ok := e.Core.Next(); !ok || at < n.Now()+time.Minute-2*time.Second {
			t.Errorf("%v: idle core's next deadline at %v (%v), want the expiry of idle state, a minute away", e.Addr(), at, ok)
		}
		if !e.Core.Quiet() {
			t.Errorf("%v: idle core is not quiet", e.Addr())
		}
	}
	if !n.RunUntil(n.Idle, n.Now()+seenBound+seenGrain) {
		t.Fatal("events still pending past the expiry of the records")
	}
	for _, e := range []*sim.Endpoint{srv, cli} {
		if at, ok := e.Core.Next(); ok {
			t.Errorf("%v: idle core has a deadline at %v", e.Addr(), at)
		}
		if st := e.Core.Stats(); st.Peers != 0 || st.PeersExpired != 1 {
			t.Errorf("%v: idle core holds %d peers, %d expired; want 0, 1", e.Addr(), st.Peers, st.PeersExpired)
		}
		if st := e.Core.Stats(); st.ServerRPCs != 0 || st.ClientRPCs != 0 || st.RecvMemory != 0 {
			t.Errorf("%v: idle core holds %d server and %d client RPCs, %d bytes", e.Addr(), st.ServerRPCs, st.ClientRPCs, st.RecvMemory)
		}
	}
}

// TestCloseAcknowledges: a client that closes acknowledges its RPCs, the
// finished one whose acknowledgment was still pending and the one whose
// server is still working, so the server frees both at once instead of
// asking a port nobody reads with NEED_ACKs until it gives up.
func TestCloseAcknowledges(t *testing.T) {
	n := sim.New(sim.Config{Seed: 6})
	srv := n.Listen(serverAP, core.Config{})
	echo(srv, n, 20*time.Millisecond, nil)
	cli := n.Listen(clientAP, core.Config{})
	got := collect(cli)
	done := send(t, cli, serverAP, request(1, 100))
	if !n.RunUntil(func() bool { return got[done] != nil }, time.Second) {
		t.Fatal("first RPC never ended")
	}
	send(t, cli, serverAP, request(2, 5000)) // its handler takes 20 ms
	n.Run(n.Now() + 2*time.Millisecond)
	if st := srv.Core.Stats(); st.PendingReplies != 1 {
		t.Fatalf("server holds %d requests awaiting replies, want 1", st.PendingReplies)
	}
	cli.Close()
	n.Run(n.Now() + time.Second)
	st := srv.Core.Stats()
	if st.ServerRPCsFreed != 2 || st.PendingReplies != 0 {
		t.Errorf("server freed %d acknowledged RPCs and holds %d requests; want 2 and 0", st.ServerRPCsFreed, st.PendingReplies)
	}
	if st.NeedAcksSent != 0 || st.Reclaimed != 0 {
		t.Errorf("server sent %d NEED_ACKs and reclaimed %d RPCs after the client closed; want none", st.NeedAcksSent, st.Reclaimed)
	}
}
