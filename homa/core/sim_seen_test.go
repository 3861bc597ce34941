package core_test

import (
	"testing"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/sim"
	"github.com/homa-go/homa/homa/wire"
)

// seenBound is how long a server remembers a silent client port's
// finished ids with the default configuration: a minute of the
// network's packet lifetime plus ReclaimTicks (2 s); seenGrain is the
// step in which the core's timer lets records go (a sixteenth).
const (
	seenBound = time.Minute + 2*time.Second
	seenGrain = seenBound / 16
)

// TestSeenExpirySim: a client port that keeps calling a server keeps
// the server's record of its finished ids for minutes; a stale copy of
// its first request, arriving after those minutes and again after
// almost the bound of the port's silence, is dropped, never run twice.
// Once the port has been silent for the bound (and a grain), the server
// lets the record go and counts it.
func TestSeenExpirySim(t *testing.T) {
	n := sim.New(sim.Config{Seed: 21})
	srv := n.Listen(serverAP, core.Config{})
	execs := map[uint64]int{}
	echo(srv, n, 0, execs)
	cli := n.Listen(clientAP, core.Config{})
	got := collect(cli)
	call := func(name uint64) uint64 {
		t.Helper()
		id := send(t, cli, serverAP, request(name, 8))
		if !n.RunUntil(func() bool { return got[id] != nil }, n.Now()+time.Second) || got[id].Err != nil {
			t.Fatalf("RPC %d did not complete", name)
		}
		return id
	}
	first := call(1)
	d := wire.Data{Common: wire.Common{SrcPort: clientAP.Port(), DstPort: serverAP.Port(), SenderID: first}, MessageLength: 8, Incoming: 8}
	dup := append(wire.AppendDataHeader(nil, &d), request(1, 8)...)
	inject := func() {
		n.Inject(clientAP.Addr(), serverAP.Addr(), dup)
		n.Run(n.Now() + 10*time.Millisecond)
	}
	// Active: an RPC every 20 s for 5 minutes.
	for i := range 15 {
		n.Run(n.Now() + 20*time.Second)
		call(uint64(100 + i))
	}
	inject()
	n.Run(n.Now() + seenBound - time.Second)
	inject()
	n.Run(n.Now() + seenBound - time.Second)
	st := srv.Core.Stats()
	if execs[1] != 1 || st.Drops[contract.DropStale] != 2 {
		t.Fatalf("first request run %d times, %d stale drops", execs[1], st.Drops[contract.DropStale])
	}
	if st.SeenExpired != 0 || st.SeenClients != 1 {
		t.Fatalf("before the bound: %d expired, %d held", st.SeenExpired, st.SeenClients)
	}
	n.Run(n.Now() + time.Second + seenGrain + time.Second)
	if st := srv.Core.Stats(); st.SeenExpired != 1 || st.SeenClients != 0 {
		t.Fatalf("after the bound: %d expired, %d held", st.SeenExpired, st.SeenClients)
	}
}
