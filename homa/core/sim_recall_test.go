package core_test

import (
	"fmt"
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
	w, err := newRecallWorld(recallCase{perPeer: 6, global: 17, hosts: 3, ports: 2, each: 17,
		work: 2480 * time.Microsecond, seed: 0x587f})
	if err != nil {
		t.Fatal(err)
	}
	if !w.run() {
		st := w.srv.Core.Stats()
		t.Fatalf("RPCs still running after a simulated minute: %d recalled, %d of them lapsed", st.Recalled, st.RecallsLapsed)
	}
	if err := w.check(); err != nil {
		t.Error(err)
	}
}

// recallCase is a server with bounds of requests awaiting replies and a
// handler that answers after work, and ports clients on each of hosts
// hosts sending each requests of 100 bytes, a round of every client at
// a time, over a network with loss and a seed.
type recallCase struct {
	perPeer, global, hosts, ports, each int
	loss                                float64
	work                                time.Duration
	seed                                uint64
}

// recallWorld is a recallCase running.
type recallWorld struct {
	n     *sim.Net
	srv   *sim.Endpoint
	execs map[uint64]int
	gots  []results
	addrs []netip.Addr // the clients' hosts
	total int
}

// newRecallWorld sets c up and sends its requests.
func newRecallWorld(c recallCase) (*recallWorld, error) {
	w := &recallWorld{execs: map[uint64]int{}}
	w.n = sim.New(sim.Config{Seed: c.seed, Loss: c.loss, Jitter: 5 * time.Microsecond})
	w.srv = w.n.Listen(serverAP, core.Config{Resend: resendPatient,
		Limits: contract.Limits{PendingReplies: c.global, PendingRepliesPerPeer: c.perPeer}})
	echo(w.srv, w.n, c.work, w.execs)
	var clients []*sim.Endpoint
	for h := range c.hosts {
		addr := netip.AddrFrom4([4]byte{10, 0, 1, byte(h + 1)})
		w.addrs = append(w.addrs, addr)
		for p := range c.ports {
			e := w.n.Listen(netip.AddrPortFrom(addr, uint16(40000+p)), core.Config{Resend: resendPatient})
			clients = append(clients, e)
			w.gots = append(w.gots, collect(e))
		}
	}
	for k := range c.each {
		for i, e := range clients {
			if _, err := e.Send(serverAP, request(uint64(i*c.each+k), 100), 0); err != nil {
				return nil, err
			}
			w.total++
		}
	}
	return w, nil
}

// run runs the network until every RPC has ended, for at most a
// simulated minute, and reports whether they all did.
func (w *recallWorld) run() bool {
	return w.n.RunUntil(func() bool {
		got := 0
		for _, g := range w.gots {
			got += len(g)
		}
		return got == w.total
	}, w.n.Now()+time.Minute)
}

// check reports an RPC that failed or a request that did not run once.
func (w *recallWorld) check() error {
	for _, g := range w.gots {
		for id, m := range g {
			if m.Err != nil {
				return fmt.Errorf("RPC %d: %v", id, m.Err)
			}
		}
	}
	for name, k := range w.execs {
		if k != 1 {
			return fmt.Errorf("request %d ran %d times", name, k)
		}
	}
	return nil
}

// TestRecallLeavesNothing: whatever the bounds, the clients, the loss
// and the handler's pace, every RPC completes, each request runs once,
// and once all are done and a resend interval has passed the server
// remembers no refusal and keeps no room: its hosts can fall idle.
func TestRecallLeavesNothing(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var c recallCase
		c.perPeer = rapid.IntRange(1, 8).Draw(rt, "perPeer")
		c.global = rapid.IntRange(c.perPeer, 3*c.perPeer).Draw(rt, "global")
		c.hosts = rapid.IntRange(1, 3).Draw(rt, "hosts")
		c.ports = rapid.IntRange(1, 3).Draw(rt, "ports")
		c.each = rapid.IntRange(1, 25).Draw(rt, "each")
		c.loss = rapid.SampledFrom([]float64{0, 0, 0.05}).Draw(rt, "loss")
		c.work = time.Duration(rapid.IntRange(0, 3000).Draw(rt, "workµs")) * time.Microsecond
		c.seed = rapid.Uint64().Draw(rt, "seed")
		w, err := newRecallWorld(c)
		if err != nil {
			rt.Fatal(err)
		}
		if !w.run() {
			rt.Fatal("RPCs still running after a simulated minute")
		}
		if err := w.check(); err != nil {
			rt.Fatal(err)
		}
		w.n.Run(w.n.Now() + 50*time.Millisecond)
		for _, a := range w.addrs {
			if all, host, reserved := w.srv.Core.Refusals(a); all != 0 || host != 0 || reserved != 0 {
				rt.Fatalf("after the RPCs: %d refusals remembered (%d of host %v), %d reserved", all, host, a, reserved)
			}
		}
	})
}
