package core_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/sim"
	"github.com/homa-go/homa/homa/wire"
)

// TestNeedAckBacklogCost: a client host whose acknowledgments are all
// lost leaves its server with thousands of answered RPCs asking for
// them, eight NEED_ACKs a tick. The RPCs over the budget wait in a queue
// rather than each running its timer at every tick, so the timers the
// server runs grow with the RPCs plus the ticks, not with their product,
// and every RPC is asked in turn.
func TestNeedAckBacklogCost(t *testing.T) {
	const (
		rpcs  = 2000
		ticks = 300
	)
	n := sim.New(sim.Config{Seed: 3, Drop: func(src, _ netip.AddrPort, pkt []byte) bool {
		typ, err := wire.PeekType(pkt)
		return src == clientAP && err == nil && typ == wire.TypeAck
	}})
	srv := n.Listen(serverAP, core.Config{})
	echo(srv, n, 0, nil)
	cli := n.Listen(clientAP, core.Config{})
	var done int
	cli.OnMessage = func(_ *sim.Endpoint, m *contract.Message) {
		if m.Err != nil {
			t.Error(m.Err)
		}
		done++
		m.Release()
	}
	for i := range rpcs {
		send(t, cli, serverAP, request(uint64(i), 100))
	}
	if !n.RunUntil(func() bool { return done == rpcs }, time.Second) {
		t.Fatalf("%d of %d RPCs ended", done, rpcs)
	}
	before := srv.Core.Stats()
	n.Run(n.Now() + ticks*time.Millisecond)
	st := srv.Core.Stats()
	if st.ServerRPCs != rpcs {
		t.Fatalf("server holds %d RPCs, want the %d never acknowledged", st.ServerRPCs, rpcs)
	}
	run := st.TimersRun - before.TimersRun
	// Each RPC's first NEED_ACK, then per tick the queue's turn and the
	// eight RPCs it serves, which wait again in the queue.
	if most := uint64(rpcs + ticks*(1+8) + ticks); run > most {
		t.Errorf("%d timers ran in %d ticks with %d RPCs waiting, want at most %d", run, ticks, rpcs, most)
	}
	asked := st.NeedAcksSent - before.NeedAcksSent
	if asked < 8*(ticks-10) || asked > 8*ticks {
		t.Errorf("%d NEED_ACKs in %d ticks, want about 8 a tick", asked, ticks)
	}
	if st.NeedAcksDeferred == 0 {
		t.Error("no NEED_ACK waited for its turn")
	}
}
