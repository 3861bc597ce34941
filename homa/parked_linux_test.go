package homa_test

import (
	"context"
	"fmt"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/netio"
	"github.com/homa-go/homa/homa/wire"
)

// wakeCounts is what an endpoint spent on the way of its messages from
// the socket to the application.
type wakeCounts struct {
	timer, vain, grace, parks, steals, handoffs, arms uint64
}

func wakesOf(e *homa.Endpoint) wakeCounts {
	s := e.Stats()
	return wakeCounts{
		timer: s.TimerWakeups, vain: s.TimerWakeupsVain, grace: homa.ReaderWakeups(e),
		parks: s.ReaderParks, steals: s.ReaderSteals, handoffs: s.Handoffs, arms: s.TimerArms,
	}
}

func (a wakeCounts) minus(b wakeCounts) wakeCounts {
	return wakeCounts{a.timer - b.timer, a.vain - b.vain, a.grace - b.grace, a.parks - b.parks, a.steals - b.steals, a.handoffs - b.handoffs, a.arms - b.arms}
}

func (a wakeCounts) perRPC(n int) string {
	f := func(v uint64) float64 { return float64(v) / float64(n) }
	return fmt.Sprintf("timer %.2f (vain %.2f), grace %.2f, parks %.2f, steals %.2f, hand-offs %.2f, timers set %.2f",
		f(a.timer), f(a.vain), f(a.grace), f(a.parks), f(a.steals), f(a.handoffs), f(a.arms))
}

// TestParkedPathWakeups counts, per RPC, what an RPC that finds both
// endpoints parked costs them beyond a blocking socket's one wake-up a
// side (TCP's: the server's read returns the request, the client's the
// response): RPCs one at a time over UDP loopback, each after a pause
// longer than any spin, the background readers' grace and the
// acknowledgment deadlines, so that every one starts from a parked
// endpoint. The server's goroutine waits in Recv; the client calls.
//
// Counts, not times: a loaded machine changes how long each step takes,
// not (much) which steps happen. The bounds leave room for a stray
// wake-up of the runtime's. Before the parked path was cut, per RPC the
// client paid a timer wake-up (its acknowledgment waited a tick), 0.6
// grace wake-ups and 0.6 steals (the background reader took the socket
// after each RPC, and the next one took it back), and the server 0.96
// timer wake-ups (the acknowledgment's deadline fired in vain).
func TestParkedPathWakeups(t *testing.T) {
	if testing.Short() {
		t.Skip("sleeps between RPCs (about 1 s)")
	}
	// The server asks for an acknowledgment 20 ms after its response
	// rather than 2: the client's comes within microseconds when it
	// acknowledges at once, as it must, but on a loaded machine (the
	// suite's packages in parallel) its thread may wait a few
	// milliseconds for a processor, and a NEED_ACK then is the protocol
	// working, not the path. A client that waited to acknowledge would
	// still show: its timer wakes (and its acknowledgments are not left
	// to ackLoop). Requests go with Send, and with SendBorrowed as
	// sock's Call sends them (its caller reads next).
	for _, borrowed := range []bool{false, true} {
		name := "Send"
		if borrowed {
			name = "SendBorrowed"
		}
		t.Run(name, func(t *testing.T) { testParkedPath(t, borrowed) })
	}
}

func testParkedPath(t *testing.T, borrowed bool) {
	var scfg homa.Config
	scfg.Ack.RequestAckTicks = 20
	client, server, dst := udpEchoPairWith(t, scfg)
	call := func(i int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req := []byte(fmt.Sprintf("request %d", i))
		var id uint64
		var err error
		if borrowed {
			id, _, err = client.SendBorrowed(dst, req, 0)
		} else {
			id, err = client.Send(dst, req, 0)
		}
		if err != nil {
			t.Fatal(err)
		}
		m, err := client.Recv(ctx, id)
		if err == nil {
			err = m.Err
		}
		if err != nil {
			t.Fatalf("RPC %d: %v", i, err)
		}
		m.Release()
	}
	// Warm up, then let everything settle.
	call(-1)
	const pause = 8 * time.Millisecond
	time.Sleep(pause)
	const rpcs = 100
	c0, s0 := wakesOf(client), wakesOf(server)
	spins0, caught0 := homa.AckSpins(server)
	// Thread wake-ups, for the log: each ends in a voluntary context
	// switch when the thread sleeps again (the runtime's own count too,
	// and both endpoints' and the test's).
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	acks0 := homa.AcksLeft(client)
	for i := range rpcs {
		call(i)
		time.Sleep(pause)
	}
	c, s := wakesOf(client).minus(c0), wakesOf(server).minus(s0)
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	t.Logf("voluntary context switches of the process per RPC: %.2f", float64(ru1.Nvcsw-ru0.Nvcsw)/rpcs)
	t.Logf("client per RPC: %s", c.perRPC(rpcs))
	t.Logf("server per RPC: %s", s.perRPC(rpcs))
	if st := server.Stats(); st.ServerRPCs != 0 {
		t.Errorf("server holds %d RPCs after the pauses, want 0 (acknowledged)", st.ServerRPCs)
	}
	check := func(side, what string, got uint64, max float64) {
		if float64(got) > max*rpcs {
			t.Errorf("%s: %.2f %s per RPC, want at most %.2f", side, float64(got)/rpcs, what, max)
		}
	}
	// The client: its reader parks at most once, for the response (not
	// when the response comes while it polls), and it reads the socket
	// itself: the background reader left the socket alone while the
	// endpoint was quiet, so there is nothing to take it from and no
	// grace to wait out. Its acknowledgment goes with the response's
	// arrival, not on a timer.
	check("client", "timer wake-ups", c.timer, 0.1)
	check("client", "grace wake-ups", c.grace, 0.1)
	check("client", "steals", c.steals, 0.1)
	check("client", "hand-offs", c.handoffs, 0.1)
	check("client", "parks", c.parks, 1.2)
	// A caller's request leaves its deadline to the caller's spin, and
	// a response that comes within it ends the deadline: no runtime
	// timer set (each wakes a thread of the process), where a request
	// sent for a later Recv sets the timer for its deadline and the
	// grace for the socket (3 a RPC). A caller that parks sets the
	// timer before it does, and moves it once the response ends the
	// deadline: two a park, which a loaded machine makes more frequent.
	if borrowed && float64(c.arms) > 2*float64(c.parks)+0.1*rpcs {
		t.Errorf("client: %.2f timers set per RPC with %.2f parks, want at most two a park (and 0.1)",
			float64(c.arms)/rpcs, float64(c.parks)/rpcs)
	}
	// The acknowledgment is not on the response's way to the caller:
	// the reader leaves it to be sent after it returns.
	if left := homa.AcksLeft(client) - acks0; left < rpcs*9/10 {
		t.Errorf("client left %d acknowledgments of %d RPCs to be sent after the response, want nearly all", left, rpcs)
	}
	// The server: its goroutine in Recv parks once for the request, and
	// once more when the acknowledgment comes after its poll (a client
	// that had parked for the response sends it a thread wake-up
	// later). Nothing is left for its timer: no NEED_ACK, no deadline
	// that fires in vain.
	check("server", "timer wake-ups", s.timer, 0.1)
	check("server", "hand-offs", s.handoffs, 0.1)
	check("server", "parks", s.parks, 2.2)
	// Its goroutine, back in Recv after each response, spins for the
	// acknowledgment of a client that acknowledges at once, and sees it
	// come: nearly always on a quiet machine (each then costs no park),
	// about half the time under two busy loops; never would be a bug.
	spins, caught := homa.AckSpins(server)
	spins, caught = spins-spins0, caught-caught0
	t.Logf("server: %d spins for acknowledgments, %d saw them come", spins, caught)
	if caught < rpcs/10 {
		t.Errorf("server: %d of %d RPCs' acknowledgments came while it spun for them, want at least %d", caught, rpcs, rpcs/10)
	}
	if n := server.Stats().TxPackets[wire.TypeNeedAck]; n > rpcs/10 {
		t.Errorf("server sent %d NEED_ACKs in %d RPCs, want at most %d", n, rpcs, rpcs/10)
	}
}

// TestCallArmsNoGrace: a caller that sends with SendBorrowed (sock's
// Call) and then waits for the response reads the socket itself, so the
// background reader's grace timer is not armed for it: arming a runtime
// timer wakes a thread (the netpoller's, or an idle one), which before
// the request left cost every call a wake-up.
func TestCallArmsNoGrace(t *testing.T) {
	client, _, dst := udpEchoPair(t)
	const rpcs = 20
	// Counted around the sends alone: the background reader and a reader
	// leaving while the endpoint is busy may arm it too, more often on a
	// loaded machine; the send armed it every time.
	var bySend uint64
	for i := range rpcs {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req := []byte(fmt.Sprintf("request %d", i))
		before := homa.GraceArms(client)
		id, b, err := client.SendBorrowed(dst, req, 0)
		bySend += homa.GraceArms(client) - before
		if err != nil {
			t.Fatal(err)
		}
		m, err := client.Recv(ctx, id)
		cancel()
		b.Wait()
		if err == nil {
			err = m.Err
		}
		if err != nil {
			t.Fatalf("RPC %d: %v", i, err)
		}
		m.Release()
		time.Sleep(time.Millisecond)
	}
	if bySend > rpcs/4 {
		t.Errorf("the client's sends armed its grace timer %d times in %d calls, want well under one a call", bySend, rpcs)
	}
}

// udpEchoPair opens a client endpoint and an echo server endpoint on
// UDP loopback, closed when the test ends; dst is the server's address.
func udpEchoPair(t *testing.T) (client, server *homa.Endpoint, dst netip.AddrPort) {
	return udpEchoPairWith(t, homa.Config{})
}

// udpEchoPairWith is udpEchoPair with a server of configuration scfg.
func udpEchoPairWith(t *testing.T, scfg homa.Config) (client, server *homa.Endpoint, dst netip.AddrPort) {
	t.Helper()
	return udpEchoPairConfigs(t, homa.Config{}, scfg)
}

// udpEchoPairConfigs is udpEchoPair with a client of configuration ccfg
// and a server of scfg.
func udpEchoPairConfigs(t *testing.T, ccfg, scfg homa.Config) (client, server *homa.Endpoint, dst netip.AddrPort) {
	t.Helper()
	lo := netip.MustParseAddr("127.0.0.1")
	sc, err := netio.OpenUDP(lo, 0, nil)
	if err != nil {
		t.Fatalf("no UDP socket on loopback: %v", err)
	}
	cc, err := netio.OpenUDP(lo, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	server = homa.NewEndpoint(sc, scfg)
	t.Cleanup(func() { server.Close() })
	client = homa.NewEndpoint(cc, ccfg)
	t.Cleanup(func() { client.Close() })
	go func() {
		for {
			m, err := server.Recv(context.Background(), 0)
			if err != nil {
				return
			}
			_ = server.Reply(m.Peer.Addr(), m.ID, m.Data)
			m.Release()
		}
	}()
	return client, server, netip.AddrPortFrom(lo, server.Port())
}
