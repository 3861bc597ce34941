package core_test

import (
	"testing"
	"time"

	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/sim"
)

// TestTrimAfterLoad: after a burst of 300 concurrent RPCs the cores keep
// their RPC structures for reuse; a Trim keeps those the interval
// needed, and once the load has stopped the next Trim lets every one go
// and reports nothing left to trim. A Trim in the middle of steady load
// keeps what the load uses.
func TestTrimAfterLoad(t *testing.T) {
	n := sim.New(sim.Config{Seed: 31})
	srv := n.Listen(serverAP, core.Config{})
	echo(srv, n, 0, nil)
	cli := n.Listen(clientAP, core.Config{})
	got := collect(cli)
	burst := func(name uint64) {
		t.Helper()
		var ids []uint64
		for i := range 300 {
			ids = append(ids, send(t, cli, serverAP, request(name+uint64(i), 3000)))
		}
		if !n.RunUntil(func() bool { return len(got) >= len(ids) }, n.Now()+time.Second) {
			t.Fatal("RPCs did not finish")
		}
		n.Run(n.Now() + 100*time.Millisecond) // acknowledgments
		clear(got)
	}
	burst(0)
	for _, e := range []*sim.Endpoint{srv, cli} {
		if st := e.Core.Stats(); st.SpareRPCs < 100 {
			t.Fatalf("%v keeps %d RPC structures after 300 RPCs", e.Addr(), st.SpareRPCs)
		}
		if !e.Core.Trim() || e.Core.Stats().SpareRPCs < 100 {
			t.Fatalf("%v: a Trim after the interval that needed them let them go", e.Addr())
		}
	}
	burst(1000) // steady load: the same again
	for _, e := range []*sim.Endpoint{srv, cli} {
		before := e.Core.Stats().SpareRPCs
		e.Core.Trim()
		if after := e.Core.Stats().SpareRPCs; after < before*9/10 {
			t.Fatalf("%v: a Trim under steady load let %d of %d structures go", e.Addr(), before-after, before)
		}
	}
	for _, e := range []*sim.Endpoint{srv, cli} {
		if e.Core.Trim() {
			t.Errorf("%v: an idle core still holds something after a Trim", e.Addr())
		}
		if st := e.Core.Stats(); st.SpareRPCs != 0 {
			t.Errorf("%v: idle core keeps %d RPC structures", e.Addr(), st.SpareRPCs)
		}
	}
	burst(2000) // and it works again
}
