package core_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/sim"
	"pgregory.net/rapid"
)

// TestRefusedRequestsRecalled: a host whose requests wait for replies
// up to its limit (PendingRepliesPerPeer) has the next ones refused;
// the server asks for each again as replies make room, oldest first, so
// that they complete at the pace the application replies, each run once.
func TestRefusedRequestsRecalled(t *testing.T) {
	n := sim.New(sim.Config{Seed: 31})
	const (
		perPeer = 20
		clients = 4
		each    = 50
		work    = time.Millisecond // the application's time per request
	)
	srv := n.Listen(serverAP, core.Config{Limits: contract.Limits{PendingRepliesPerPeer: perPeer}})
	execs := map[uint64]int{}
	echo(srv, n, work, execs)
	type client struct {
		e   *sim.Endpoint
		got results
		ids []uint64
	}
	cs := make([]*client, clients)
	for i := range cs {
		e := n.Listen(netip.AddrPortFrom(clientAP.Addr(), uint16(40000+i)), core.Config{})
		cs[i] = &client{e: e, got: collect(e)}
	}
	start := n.Now()
	for k := range each {
		for i, c := range cs {
			c.ids = append(c.ids, send(t, c.e, serverAP, request(uint64(i*each+k), 100)))
		}
	}
	done := func() bool {
		for _, c := range cs {
			if len(c.got) < len(c.ids) {
				return false
			}
		}
		return true
	}
	if !n.RunUntil(done, n.Now()+10*time.Second) {
		t.Fatal("requests never completed")
	}
	took := n.Now() - start
	var resends uint64
	for i, c := range cs {
		for _, id := range c.ids {
			if m := c.got[id]; m.Err != nil {
				t.Fatalf("client %d, RPC %d: %v", i, id, m.Err)
			}
		}
		resends += c.e.Core.Stats().ResendsSent
	}
	for name, k := range execs {
		if k != 1 {
			t.Errorf("request %d ran %d times", name, k)
		}
	}
	st := srv.Core.Stats()
	t.Logf("%d requests in %v: refused %d, recalled %d (lapsed %d), client RESENDs %d", clients*each, took, st.Drops[contract.DropLimit], st.Recalled, st.RecallsLapsed, resends)
	if st.Drops[contract.DropLimit] == 0 {
		t.Fatal("no request was refused: the test does not reach the limit")
	}
	// The application answers perPeer requests a millisecond: that is
	// the pace. Left to their clients' RESEND timers, the refused
	// requests took 50 ms and a RESEND each.
	ideal := time.Duration(clients*each/perPeer) * work
	if st.Recalled != st.Drops[contract.DropLimit] || st.RecallsLapsed != 0 || took > ideal*12/10 {
		t.Errorf("refused %d requests, recalled %d (%d lapsed), all done in %v; want each recalled, none lapsed, in %v at most",
			st.Drops[contract.DropLimit], st.Recalled, st.RecallsLapsed, took, ideal*12/10)
	}
}

// TestRefusalsBounded: what a flood of requests at the bound makes the
// server remember is bounded by configuration (PendingReplies refusals
// per host, twice that in all), so one host cannot take it all; the
// rest are dropped as before.
func TestRefusalsBounded(t *testing.T) {
	n := sim.New(sim.Config{Seed: 32})
	const bound = 10
	srv := n.Listen(serverAP, core.Config{Limits: contract.Limits{PendingReplies: bound, PendingRepliesPerPeer: bound / 2}})
	srv.OnMessage = func(*sim.Endpoint, *contract.Message) {} // never answers
	flood := func(host netip.Addr, count int) {
		for i := range count {
			n.Inject(host, serverAP.Addr(), forgedData(40000, uint64(2*i+2), 100, 0, 100, 100))
		}
		n.Run(n.Now() + time.Millisecond)
	}
	a, b, c := netip.MustParseAddr("10.0.9.1"), netip.MustParseAddr("10.0.9.2"), netip.MustParseAddr("10.0.9.3")
	flood(a, 100)
	if all, host, _ := srv.Core.Refusals(a); host != bound || all != bound {
		t.Fatalf("after 100 requests from one host: %d refusals remembered for it, %d in all; want %d", host, all, bound)
	}
	flood(b, 100)
	flood(c, 100)
	allA, hostA, _ := srv.Core.Refusals(a)
	_, hostB, _ := srv.Core.Refusals(b)
	_, hostC, _ := srv.Core.Refusals(c)
	if allA != 2*bound || hostA != bound || hostB != bound || hostC != 0 {
		t.Fatalf("refusals remembered: %d in all, by host %d, %d, %d; want %d, %d, %d, 0", allA, hostA, hostB, hostC, 2*bound, bound, bound)
	}
	if st := srv.Core.Stats(); st.Recalled != 0 || st.ServerRPCs != bound {
		t.Fatalf("%d recalled, %d server RPCs; want 0 and %d (nothing replied)", st.Recalled, st.ServerRPCs, bound)
	}
}

// TestRecallRetransmittedRefusal: a request refused as it came again is
// not recalled, since its client, having just retransmitted it, would
// not answer the recall for a resend interval: the case
// TestRecallLeavesNothing found, where the room reserved for such
// recalls filled a host's bound, every request of the host was refused
// for it, and 12 RPCs stayed unanswered for a simulated minute.
func TestRecallRetransmittedRefusal(t *testing.T) {
	n := sim.New(sim.Config{Seed: 0x587f, Jitter: 5 * time.Microsecond})
	srv := n.Listen(serverAP, core.Config{Resend: resendPatient,
		Limits: contract.Limits{PendingReplies: 17, PendingRepliesPerPeer: 6}})
	execs := map[uint64]int{}
	echo(srv, n, 2480*time.Microsecond, execs)
	var clients []*sim.Endpoint
	var gots []results
	for h := range 3 {
		for p := range 2 {
			e := n.Listen(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 1, byte(h + 1)}), uint16(40000+p)), core.Config{Resend: resendPatient})
			clients = append(clients, e)
			gots = append(gots, collect(e))
		}
	}
	const each = 17
	total := 0
	for k := range each {
		for i, e := range clients {
			send(t, e, serverAP, request(uint64(i*each+k), 100))
			total++
		}
	}
	done := func() bool {
		got := 0
		for _, g := range gots {
			got += len(g)
		}
		return got == total
	}
	if !n.RunUntil(done, n.Now()+time.Minute) {
		st := srv.Core.Stats()
		t.Fatalf("RPCs still running after a simulated minute: %d recalled, %d of them lapsed", st.Recalled, st.RecallsLapsed)
	}
	for name, k := range execs {
		if k != 1 {
			t.Errorf("request %d ran %d times", name, k)
		}
	}
}

// TestRecallLeavesNothing: whatever the bounds, the clients, the loss
// and the handler's pace, every RPC completes, each request runs once,
// and once all are done and a resend interval has passed the server
// remembers no refusal and keeps no room: its hosts can fall idle.
func TestRecallLeavesNothing(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		perPeer := rapid.IntRange(1, 8).Draw(rt, "perPeer")
		global := rapid.IntRange(perPeer, 3*perPeer).Draw(rt, "global")
		hosts := rapid.IntRange(1, 3).Draw(rt, "hosts")
		ports := rapid.IntRange(1, 3).Draw(rt, "ports")
		each := rapid.IntRange(1, 25).Draw(rt, "each")
		loss := rapid.SampledFrom([]float64{0, 0, 0.05}).Draw(rt, "loss")
		work := time.Duration(rapid.IntRange(0, 3000).Draw(rt, "workµs")) * time.Microsecond
		n := sim.New(sim.Config{Seed: rapid.Uint64().Draw(rt, "seed"), Loss: loss, Jitter: 5 * time.Microsecond})
		srv := n.Listen(serverAP, core.Config{Resend: resendPatient,
			Limits: contract.Limits{PendingReplies: global, PendingRepliesPerPeer: perPeer}})
		execs := map[uint64]int{}
		echo(srv, n, work, execs)
		var clients []*sim.Endpoint
		var gots []results
		var addrs []netip.Addr
		total := 0
		for h := range hosts {
			addr := netip.AddrFrom4([4]byte{10, 0, 1, byte(h + 1)})
			addrs = append(addrs, addr)
			for p := range ports {
				e := n.Listen(netip.AddrPortFrom(addr, uint16(40000+p)), core.Config{Resend: resendPatient})
				clients = append(clients, e)
				gots = append(gots, collect(e))
			}
		}
		for k := range each {
			for i, e := range clients {
				if _, err := e.Send(serverAP, request(uint64(i*each+k), 100), 0); err != nil {
					rt.Fatal(err)
				}
				total++
			}
		}
		done := func() bool {
			got := 0
			for _, g := range gots {
				got += len(g)
			}
			return got == total
		}
		if !n.RunUntil(done, n.Now()+time.Minute) {
			rt.Fatal("RPCs still running after a simulated minute")
		}
		for _, g := range gots {
			for id, m := range g {
				if m.Err != nil {
					rt.Fatalf("RPC %d: %v", id, m.Err)
				}
			}
		}
		for name, k := range execs {
			if k != 1 {
				rt.Fatalf("request %d ran %d times", name, k)
			}
		}
		n.Run(n.Now() + 50*time.Millisecond)
		for _, a := range addrs {
			if all, host, reserved := srv.Core.Refusals(a); all != 0 || host != 0 || reserved != 0 {
				rt.Fatalf("after the RPCs: %d refusals remembered (%d of host %v), %d reserved", all, host, a, reserved)
			}
		}
	})
}
