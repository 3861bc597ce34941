package core_test

import (
	"testing"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/sim"
)

// TestPortsShareHost: one client port of a host keeps every one of the
// host's incoming request slots busy, sending a packet of each request
// at every tick so that none is ever idle. A request from another port
// of the same host is still admitted and answered: the busiest port
// gives way, and the host as a whole stays within its share.
func TestPortsShareHost(t *testing.T) {
	const share = 40
	n := sim.New(sim.Config{Seed: 11})
	srv := n.Listen(serverAP, core.Config{Limits: contract.Limits{IncomingRPCsPerPeer: share}})
	echo(srv, n, 0, nil)
	// The hog: share requests of 1 MB from port 40000, one packet each
	// tick, never complete.
	const hogPort = 40000
	offset := uint32(0)
	keepBusy := func() {
		for i := range share {
			n.Inject(attacker, serverAP.Addr(), forgedData(hogPort, uint64(2+2*i), contract.MaxMessage, offset, 1000, 400_000))
		}
		offset += 1000
	}
	keepBusy()
	n.Run(n.Now() + 100*time.Microsecond)
	if got := srv.Core.Stats().IncomingRPCs; got != share {
		t.Fatalf("the hog holds %d requests, want its host's share %d", got, share)
	}
	// The neighbour: port 40001 of the same host, a request of one packet.
	answered := false
	var tick func()
	tick = func() {
		keepBusy()
		if !answered {
			n.After(time.Millisecond, tick)
		}
	}
	n.After(time.Millisecond, tick)
	n.Run(n.Now() + 3*time.Millisecond)
	before := srv.Core.Stats()
	n.Inject(attacker, serverAP.Addr(), forgedData(hogPort+1, 1000, 100, 0, 100, 100))
	n.Run(n.Now() + 3*time.Millisecond)
	st := srv.Core.Stats()
	answered = true
	if st.RequestsReceived != before.RequestsReceived+1 {
		t.Fatalf("the neighbour's request was not delivered: %d requests delivered, drops %v", st.RequestsReceived-before.RequestsReceived, st.Drops)
	}
	if st.Shed == before.Shed {
		t.Error("no request of the hog was shed for the neighbour")
	}
	if st.IncomingRPCs > share {
		t.Errorf("the host holds %d incoming requests, over its share %d", st.IncomingRPCs, share)
	}
}
