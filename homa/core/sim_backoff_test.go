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

// closedLoop keeps n RPCs of size bytes in flight from cli to the
// server until stop, starting one as each ends, and returns how many
// ended and how many failed.
func closedLoop(t *testing.T, net *sim.Net, cli *sim.Endpoint, n, size int, stop time.Duration) (done, failed *int) {
	t.Helper()
	done, failed = new(int), new(int)
	name := uint64(0)
	next := func() {
		name++
		send(t, cli, serverAP, request(name, size))
	}
	cli.OnMessage = func(_ *sim.Endpoint, m *contract.Message) {
		*done++
		if m.Err != nil {
			*failed++
		}
		if net.Now() < stop {
			next()
		}
	}
	for range n {
		next()
	}
	return done, failed
}

// slowServer runs a closed loop of many RPCs against a server that is
// alive but behind, and returns the client's and the server's counters
// over the second half of the run (the first lets the client learn).
func slowServer(t *testing.T, cfg sim.Config, handler time.Duration, inFlight int) (cli, srv contract.Stats, done, failed int) {
	t.Helper()
	const run = 2 * time.Second
	net := sim.New(cfg)
	s := net.Listen(serverAP, core.Config{})
	echo(s, net, handler, nil)
	c := net.Listen(clientAP, core.Config{})
	d, f := closedLoop(t, net, c, inFlight, 100, run)
	net.Run(run / 2)
	c0, s0 := c.Core.Stats(), s.Core.Stats()
	n0 := *d
	net.Run(run)
	c1, s1 := c.Core.Stats(), s.Core.Stats()
	cli = contract.Stats{ResendsSent: c1.ResendsSent - c0.ResendsSent, ResendsUnneeded: c1.ResendsUnneeded - c0.ResendsUnneeded,
		Drops: map[contract.DropReason]uint64{contract.DropUnknownRPC: c1.Drops[contract.DropUnknownRPC] - c0.Drops[contract.DropUnknownRPC]}}
	srv = contract.Stats{Retransmits: s1.Retransmits - s0.Retransmits}
	return cli, srv, *d - n0, *f
}

// TestSlowServer: a client with many RPCs in flight to a server that is
// alive but behind must learn that its RESENDs are not needed: once it
// has (the second second of the run), it sends few, the server
// retransmits few responses, and no RPC fails.
//
//   - queue: the server reads its socket at 20,000 packets a second and
//     400 RPCs are in flight, so each request waits about 20 ms (four
//     times the RESEND delay) before the server reads it. RESENDs wait
//     in the same queue, behind the request they ask about: by the time
//     the server reads one it has replied, and it sends the response
//     again, to arrive after the original.
//   - busy: the server's application takes 40 ms to answer each of 200
//     RPCs in flight (eight times the RESEND delay), and the server
//     answers each RESEND BUSY.
func TestSlowServer(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      sim.Config
		handler  time.Duration
		inFlight int
		// at most one RESEND and one retransmitted response in per RPCs
		per uint64
	}{
		{"queue", sim.Config{Seed: 7, ReadBatch: 1, ReadDelay: 50 * time.Microsecond}, 0, 400, 50},
		{"busy", sim.Config{Seed: 8}, 40 * time.Millisecond, 200, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli, srv, done, failed := slowServer(t, tc.cfg, tc.handler, tc.inFlight)
			t.Logf("second second: %d RPCs, %d RESENDs (%d unneeded), %d responses retransmitted, %d dropped at the client",
				done, cli.ResendsSent, cli.ResendsUnneeded, srv.Retransmits, cli.Drops[contract.DropUnknownRPC])
			if failed != 0 {
				t.Errorf("%d RPCs failed", failed)
			}
			if done < 1000 {
				t.Fatalf("only %d RPCs in the second second", done)
			}
			if cli.ResendsSent > uint64(done)/tc.per {
				t.Errorf("%d RESENDs for %d RPCs to a live server; want at most one in %d", cli.ResendsSent, done, tc.per)
			}
			if srv.Retransmits > uint64(done)/tc.per {
				t.Errorf("the server retransmitted %d responses for %d RPCs; want at most one in %d", srv.Retransmits, done, tc.per)
			}
		})
	}
}

// slowThenQuiet runs a closed loop of inFlight RPCs against a server
// whose application takes handler to answer, until stop; then the
// server answers after *delay instead.
func slowThenQuiet(t *testing.T, cfg sim.Config, handler time.Duration, inFlight int, stop time.Duration) (n *sim.Net, cli *sim.Endpoint, delay *time.Duration, done, failed *int) {
	t.Helper()
	n = sim.New(cfg)
	s := n.Listen(serverAP, core.Config{})
	delay = &handler
	s.OnMessage = func(e *sim.Endpoint, m *contract.Message) {
		if m.IsRequest() {
			n.After(*delay, func() { _ = e.Reply(m, m.Data) })
		}
	}
	cli = n.Listen(clientAP, core.Config{})
	done, failed = closedLoop(t, n, cli, inFlight, 100, stop)
	return n, cli, delay, done, failed
}

// TestSlowServerDies: a server whose application took 900 ms per RPC
// (so its client backed off to RESENDs 1024 ms after a request, then
// every 128 ms) vanishes. Its client stops backing off once it has heard
// nothing for resend.BackoffLapse (2048 ticks), and times the RPCs out
// on the plain timing: all of them fail within 2.5 s, where 20 RESENDs
// at the backed-off timing would take 3.6 s.
func TestSlowServerDies(t *testing.T) {
	var dead bool
	cfg := sim.Config{Seed: 9, Drop: func(src, dst netip.AddrPort, _ []byte) bool {
		return dead && (src == serverAP || dst == serverAP)
	}}
	const die = 3 * time.Second
	n, cli, _, done, failed := slowThenQuiet(t, cfg, 900*time.Millisecond, 20, die)
	n.Run(die)
	if st := cli.Core.Stats(); st.ResendsUnneeded == 0 {
		t.Fatalf("the client never learned its server is slow: %+v", st)
	}
	dead = true
	started := *done + 20
	if !n.RunUntil(func() bool { return *done == started }, die+2500*time.Millisecond) {
		t.Fatalf("%d of %d RPCs ended within 2.5 s of their server's death", *done, started)
	}
	if *failed != 20 {
		t.Fatalf("%d RPCs failed; want the 20 in flight at the death", *failed)
	}
	if st := cli.Core.Stats(); st.RPCTimeouts != 20 {
		t.Fatalf("%d RPCs timed out; want 20", st.RPCTimeouts)
	}
}

// TestSlowServerRecovers: once a slow server answers promptly again
// (within 1 ms, not 80), its client recovers a lost response on the
// plain timing (5 ms), not the backed-off one (80 ms).
func TestSlowServerRecovers(t *testing.T) {
	var drop bool
	var dropped uint64
	cfg := sim.Config{Seed: 10, Drop: func(src, _ netip.AddrPort, pkt []byte) bool {
		if typ, err := wire.PeekType(pkt); drop && src == serverAP && err == nil && typ == wire.TypeData {
			drop, dropped = false, senderID(pkt)^1
			return true
		}
		return false
	}}
	const fast = 2 * time.Second
	n, cli, delay, _, failed := slowThenQuiet(t, cfg, 80*time.Millisecond, 20, time.Hour)
	n.Run(fast)
	if st := cli.Core.Stats(); st.ResendsUnneeded == 0 {
		t.Fatalf("the client never learned its server is slow: %+v", st)
	}
	*delay = time.Millisecond
	n.Run(fast + 300*time.Millisecond) // the slow RPCs drain, new ones are prompt
	ended := map[uint64]time.Duration{}
	prev := cli.OnMessage
	cli.OnMessage = func(e *sim.Endpoint, m *contract.Message) {
		ended[m.ID] = n.Now()
		prev(e, m)
	}
	drop = true
	at := n.Now()
	n.Run(at + 200*time.Millisecond)
	if dropped == 0 || *failed != 0 {
		t.Fatalf("dropped response of %d, %d failed", dropped, *failed)
	}
	took := ended[dropped] - at
	if ended[dropped] == 0 || took > 20*time.Millisecond {
		t.Fatalf("the RPC whose response was lost ended %v after the loss; want within 20 ms", took)
	}
}

// TestHeldRequestBacksOff: a request the server holds for a second (a
// long poll) among quick RPCs to the same server, whose prompt
// responses keep the peer's timing plain, is asked about with RESENDs
// that back off, each answered BUSY, rather than every resend interval;
// and the quick RPCs' loss recovery keeps the plain timing: a response
// lost whole is asked for after the plain delay.
func TestHeldRequestBacksOff(t *testing.T) {
	const hold = time.Second
	dropNext := false
	net := sim.New(sim.Config{Seed: 9, Drop: func(src, _ netip.AddrPort, pkt []byte) bool {
		if typ, err := wire.PeekType(pkt); dropNext && src == serverAP && err == nil && typ == wire.TypeData {
			dropNext = false
			return true
		}
		return false
	}})
	s := net.Listen(serverAP, core.Config{})
	s.OnMessage = func(e *sim.Endpoint, m *contract.Message) {
		if !m.IsRequest() {
			return
		}
		if len(m.Data) == 1 {
			net.After(hold, func() { _ = e.Reply(m, m.Data) })
			return
		}
		_ = e.Reply(m, m.Data)
	}
	c := net.Listen(clientAP, core.Config{})
	var held *contract.Message
	var quick, lostAt, recoveredAt time.Duration
	id := send(t, c, serverAP, []byte{1})
	c.OnMessage = func(_ *sim.Endpoint, m *contract.Message) {
		if m.ID == id {
			held = m
			return
		}
		quick++
		if m.Err != nil {
			t.Errorf("quick RPC failed: %v", m.Err)
		}
		if lostAt != 0 && recoveredAt == 0 {
			recoveredAt = net.Now()
		}
		if net.Now() < hold {
			net.After(time.Millisecond, func() {
				if net.Now() > hold/2 && lostAt == 0 {
					dropNext, lostAt = true, net.Now()
				}
				send(t, c, serverAP, request(uint64(quick), 100))
			})
		}
	}
	send(t, c, serverAP, request(0, 100))
	before := c.Core.Stats()
	net.Run(hold + 100*time.Millisecond)
	after := c.Core.Stats()
	if held == nil || held.Err != nil {
		t.Fatalf("held RPC: %+v", held)
	}
	resends := after.ResendsSent - before.ResendsSent
	t.Logf("%d quick RPCs; %d RESENDs (%d unneeded); the lost response asked for after %v",
		quick, resends, after.ResendsUnneeded-before.ResendsUnneeded, recoveredAt-lostAt)
	if quick < 500 {
		t.Fatalf("only %d quick RPCs", quick)
	}
	// Each BUSY doubles the held RPC's delay until it covers the wait:
	// 8 RESENDs in a second, and one for the lost response.
	if resends > 10 {
		t.Errorf("%d RESENDs while a request was held for %v; want at most 10", resends, hold)
	}
	if d := recoveredAt - lostAt; recoveredAt == 0 || d > 15*time.Millisecond {
		t.Errorf("a lost quick response came %v after the loss; want the plain RESEND delay", d)
	}
}
