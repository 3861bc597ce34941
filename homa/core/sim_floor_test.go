package core_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/homa-go/homa/ack"
	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/sim"
	"github.com/homa-go/homa/homa/wire"
)

// pushFloor runs more RPCs from cli than the server's exact record of a
// client port spans, so that its floor passes every id before them.
func pushFloor(t *testing.T, n *sim.Net, cli *sim.Endpoint) {
	t.Helper()
	done, next := 0, 0
	total := ack.DefaultSeenCapacity + 100
	prev := cli.OnMessage
	cli.OnMessage = func(e *sim.Endpoint, m *contract.Message) {
		done++
		if next < total {
			send(t, cli, serverAP, request(uint64(1000+next), 8))
			next++
		}
	}
	for range 64 {
		send(t, cli, serverAP, request(uint64(1000+next), 8))
		next++
	}
	if !n.RunUntil(func() bool { return done == total }, n.Now()+time.Minute) {
		t.Fatalf("%d of %d RPCs done", done, total)
	}
	cli.OnMessage = prev
}

// TestFloorDoesNotStarveSim: while every packet of one RPC is lost, more
// RPCs than the server's exact record spans finish from the same client
// port and push its floor past the stalled id. Once packets get through,
// the stalled RPC still completes, exactly once: the client's RESENDs
// get it back in.
func TestFloorDoesNotStarveSim(t *testing.T) {
	block := true
	var stalled uint64
	n := sim.New(sim.Config{Seed: 13, Drop: func(_, dst netip.AddrPort, pkt []byte) bool {
		if !block || dst != serverAP {
			return false
		}
		var p wire.Packet
		if p.Parse(pkt) != nil {
			return false
		}
		if p.Type == wire.TypeData {
			return string(p.Data.Payload) == string(request(1, 8))
		}
		return stalled != 0 && senderID(pkt) == stalled
	}})
	never := core.Config{Resend: resendConfig(1 << 30)}
	srv := n.Listen(serverAP, never)
	execs := map[uint64]int{}
	echo(srv, n, 0, execs)
	cli := n.Listen(clientAP, never)
	got := collect(cli)
	stalled = send(t, cli, serverAP, request(1, 8))
	pushFloor(t, n, cli)
	block = false
	if !n.RunUntil(func() bool { return got[stalled] != nil }, n.Now()+time.Second) {
		t.Fatalf("stalled RPC did not complete; server drops %v", srv.Core.Stats().Drops)
	}
	if got[stalled].Err != nil || execs[1] != 1 {
		t.Fatalf("stalled RPC: %v, executed %d times", got[stalled].Err, execs[1])
	}
}

// TestStaleBelowFloor: after the floor passed a finished RPC, a stale
// RESEND for it and a stale retransmission of its request do not run it
// again: the server waits for a second RESEND before it believes a
// client still waits, and the client, which has the response, withdraws
// the claim with RPC_UNKNOWN.
func TestStaleBelowFloor(t *testing.T) {
	n := sim.New(sim.Config{Seed: 14})
	srv := n.Listen(serverAP, core.Config{})
	execs := map[uint64]int{}
	echo(srv, n, 0, execs)
	cli := n.Listen(clientAP, core.Config{})
	got := collect(cli)
	id := send(t, cli, serverAP, request(1, 8))
	if !n.RunUntil(func() bool { return got[id] != nil }, time.Second) {
		t.Fatal("first RPC")
	}
	pushFloor(t, n, cli)
	d := wire.Data{Common: wire.Common{SrcPort: clientAP.Port(), DstPort: serverAP.Port(), SenderID: id}, MessageLength: 8, Incoming: 8}
	d.Retransmit = 1
	stale := append(wire.AppendDataHeader(nil, &d), request(1, 8)...)
	resend := (&wire.Resend{Common: d.Common, Length: wire.ResendToEnd}).Append(nil)
	for range 3 {
		n.Inject(clientAP.Addr(), serverAP.Addr(), resend)
		n.Run(n.Now() + 10*time.Millisecond)
		n.Inject(clientAP.Addr(), serverAP.Addr(), stale)
		n.Run(n.Now() + time.Millisecond)
	}
	if execs[1] != 1 {
		t.Fatalf("request executed %d times after stale duplicates", execs[1])
	}
	if st := srv.Core.Stats(); st.Drops[contract.DropStale] == 0 {
		t.Fatalf("no stale drop counted: %v", st.Drops)
	}
}
