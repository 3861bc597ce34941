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

// The attacks of a host that forges packets, each against what it must
// not achieve.

// forgedData is the first DATA packet of a request from port sport with
// client id id that claims a message of length bytes and carries n.
func forgedData(sport uint16, id uint64, length uint32, off uint32, n int, incoming uint32) []byte {
	d := wire.Data{
		Common:        wire.Common{SrcPort: sport, DstPort: serverAP.Port(), SenderID: id},
		MessageLength: length,
		Incoming:      incoming,
	}
	d.Sequence, d.SegOffset = off, off
	return append(wire.AppendDataHeader(nil, &d), make([]byte, n)...)
}

var attacker = netip.MustParseAddr("10.0.0.66")

// TestForgedLengthsBounded: forged first packets that each claim a
// 1,000,000-byte message commit what arrived (1,400 bytes, in a 2 KiB
// buffer), never the claim; past the attacker's share of receive memory
// they are dropped; a legitimate host's 1 MB request still completes.
func TestForgedLengthsBounded(t *testing.T) {
	n := sim.New(sim.Config{Seed: 7})
	srv := n.Listen(serverAP, core.Config{})
	echo(srv, n, 0, nil)
	lim := srv.Core.Config().Limits
	forge := func(src netip.Addr, count, size int) {
		for i := range count {
			n.Inject(src, serverAP.Addr(), forgedData(40000, uint64(2+2*i), contract.MaxMessage, 0, size, 40_000))
			n.Run(n.Now() + 100*time.Nanosecond)
		}
		n.Run(n.Now() + 10*time.Microsecond) // the last ones arrive
	}
	forge(attacker, 2000, 1400)
	st := srv.Core.Stats()
	if st.RecvMemory > 2000*2048 || st.IncomingRPCs != 2000 || st.TotalDrops() != 0 {
		t.Fatalf("2,000 forged 1 MB claims of 1,400 bytes each hold %d bytes in %d RPCs, want at most %d (%+v, shed %d)", st.RecvMemory, st.IncomingRPCs, 2000*2048, st.Drops, st.Shed)
	}
	before := st.RecvMemory
	other := netip.MustParseAddr("10.0.0.67")
	forge(other, 2000, 60_000) // 120 MB of first packets, over the host's share
	st = srv.Core.Stats()
	if st.RecvMemory-before > lim.RecvMemoryPerPeer {
		t.Fatalf("forged lengths hold %d bytes, over the attacker's share of %d", st.RecvMemory, lim.RecvMemoryPerPeer)
	}
	if st.Drops[contract.DropMemory] == 0 {
		t.Fatalf("nothing dropped past the attacker's share: %+v", st.Drops)
	}
	t.Logf("then 2,000 forged 1 MB claims of 60,000 bytes each from another host: %d bytes held in all (%d RPCs), drops %v", st.RecvMemory, st.IncomingRPCs, st.Drops)
	cli := n.Listen(clientAP, core.Config{})
	got := collect(cli)
	id := send(t, cli, serverAP, request(1, contract.MaxMessage))
	if !n.RunUntil(func() bool { return got[id] != nil }, n.Now()+time.Second) || got[id].Err != nil {
		t.Fatalf("legitimate 1 MB RPC during the attack: %+v", got[id])
	}
}

// TestFloodSharedAddress: a host fills its share of incoming RPCs with
// requests that never complete. Another client port on the same host,
// and another host, still get their RPCs through, at once (the flood's
// idle RPCs are shed), not after the flood's RPCs time out.
func TestFloodSharedAddress(t *testing.T) {
	n := sim.New(sim.Config{Seed: 8})
	srv := n.Listen(serverAP, core.Config{})
	echo(srv, n, 0, nil)
	for i := range 5000 {
		n.Inject(attacker, serverAP.Addr(), forgedData(40000, uint64(2+2*i), 3000, 0, 1000, 3000))
	}
	n.Run(n.Now() + 2*time.Millisecond)
	lim := srv.Core.Config().Limits
	if st := srv.Core.Stats(); st.IncomingRPCs != lim.IncomingRPCsPerPeer {
		t.Fatalf("flood holds %d incoming RPCs, want the per-host share %d", st.IncomingRPCs, lim.IncomingRPCsPerPeer)
	}
	start := n.Now()
	neighbour := n.Listen(netip.AddrPortFrom(attacker, 40001), core.Config{})
	other := n.Listen(clientAP, core.Config{})
	gotN, gotO := collect(neighbour), collect(other)
	idN := send(t, neighbour, serverAP, request(1, 3000))
	idO := send(t, other, serverAP, request(2, 3000))
	if !n.RunUntil(func() bool { return gotN[idN] != nil && gotO[idO] != nil }, start+20*time.Millisecond) {
		t.Fatalf("after a flood from %v: the same host's other port done %v, another host done %v, within 20 ms", attacker, gotN[idN] != nil, gotO[idO] != nil)
	}
	if gotN[idN].Err != nil || gotO[idO].Err != nil {
		t.Fatalf("RPCs failed: %v, %v", gotN[idN].Err, gotO[idO].Err)
	}
	if st := srv.Core.Stats(); st.Shed == 0 {
		t.Error("nothing shed")
	}
}

// TestSilentGrantedSenders: eight hosts start 120 KB messages, take the
// grants the scheduler gives them and never send a byte more: they lose
// their grants, and a real sender's message then gets the incoming
// budget and completes, long before the silent ones time out.
func TestSilentGrantedSenders(t *testing.T) {
	n := sim.New(sim.Config{Seed: 9})
	srv := n.Listen(serverAP, core.Config{})
	echo(srv, n, 0, nil)
	for h := range 8 {
		src := netip.AddrFrom4([4]byte{10, 0, 1, byte(h + 1)})
		n.Inject(src, serverAP.Addr(), forgedData(40000, 2, 120_000, 0, 1400, 10_000))
	}
	n.Run(n.Now() + time.Millisecond)
	if st := srv.Core.Stats(); st.Grants.Incoming < 300_000 {
		t.Fatalf("the silent senders were granted only %d bytes", st.Grants.Incoming)
	}
	cli := n.Listen(clientAP, core.Config{})
	got := collect(cli)
	id := send(t, cli, serverAP, request(1, 120_000))
	if !n.RunUntil(func() bool { return got[id] != nil }, n.Now()+50*time.Millisecond) {
		t.Fatalf("a real 120 KB request starved behind silent granted senders: %+v", srv.Core.Stats().Grants)
	}
	if got[id].Err != nil {
		t.Fatal(got[id].Err)
	}
	if st := srv.Core.Stats(); st.GrantsRevoked < 8 {
		t.Errorf("%d grants revoked, want the 8 silent senders'", st.GrantsRevoked)
	}
}

// TestResendAmplification: a 1 MB response is sent and never
// acknowledged. RESENDs that ask for all of it, from its client's address
// and port, yield at most one copy of it in 100 ms, whether they come in
// a burst or spread out, and whether they ask "to the end" or name the
// whole range.
func TestResendAmplification(t *testing.T) {
	for _, tc := range []struct {
		name   string
		every  time.Duration
		length uint32
	}{
		{"burst-to-end", 0, wire.ResendToEnd},
		{"spread-to-end", 5 * time.Millisecond, wire.ResendToEnd},
		{"burst-whole", 0, contract.MaxMessage},
		{"spread-whole", 5 * time.Millisecond, contract.MaxMessage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var silenced bool // the client says nothing more once it has the response
			n := sim.New(sim.Config{Seed: 10, Drop: func(src, _ netip.AddrPort, _ []byte) bool {
				return silenced && src == clientAP
			}})
			srv := n.Listen(serverAP, core.Config{})
			echo(srv, n, 0, nil)
			cli := n.Listen(clientAP, core.Config{})
			got := collect(cli)
			id := send(t, cli, serverAP, request(1, contract.MaxMessage))
			cli.OnMessage = func(_ *sim.Endpoint, m *contract.Message) { got[m.ID] = m; silenced = true }
			if !n.RunUntil(func() bool { return got[id] != nil }, time.Second) {
				t.Fatal("no response")
			}
			n.Run(n.Now() + 10*time.Millisecond)
			before := n.Stats().Bytes[serverAP.Addr()]
			rs := wire.Resend{Common: wire.Common{SrcPort: clientAP.Port(), DstPort: serverAP.Port(), SenderID: id}, Length: tc.length}
			in := 0
			for i := range 20 {
				n.After(time.Duration(i)*tc.every, func() {
					pkt := rs.Append(nil)
					in += len(pkt)
					n.Inject(clientAP.Addr(), serverAP.Addr(), pkt)
				})
			}
			n.Run(n.Now() + 100*time.Millisecond)
			out := n.Stats().Bytes[serverAP.Addr()] - before
			if out > contract.MaxMessage*11/10 {
				t.Fatalf("20 RESENDs (%d bytes) made the server send %d bytes: more than one copy of the 1 MB response", in, out)
			}
			t.Logf("20 RESENDs, %d bytes in, %d bytes out: %.0f bytes out per byte in", in, out, float64(out)/float64(in))
		})
	}
}

// TestForgedRPCUnknown: an RPC_UNKNOWN forged with the client's own
// address and port does not lose a live server RPC: the client's next
// RESEND keeps it, and the RPC completes. Forged from another host, it
// and a forged RESEND do nothing at all.
func TestForgedRPCUnknown(t *testing.T) {
	n := sim.New(sim.Config{Seed: 11})
	srv := n.Listen(serverAP, core.Config{})
	execs := map[uint64]int{}
	echo(srv, n, 20*time.Millisecond, execs)
	cli := n.Listen(clientAP, core.Config{})
	got := collect(cli)
	id := send(t, cli, serverAP, request(1, 5000))
	n.Run(n.Now() + 2*time.Millisecond)
	forge := func(from netip.Addr, pkt []byte) { n.Inject(from, serverAP.Addr(), pkt) }
	hdr := wire.Common{SrcPort: clientAP.Port(), DstPort: serverAP.Port(), SenderID: id}
	unknown := wire.Bare{Common: hdr}
	unknown.Type = wire.TypeRPCUnknown
	forge(attacker, unknown.Append(nil))
	forge(attacker, (&wire.Resend{Common: hdr, Length: wire.ResendToEnd}).Append(nil))
	n.Run(n.Now() + time.Millisecond)
	if st := srv.Core.Stats(); st.ServerRPCs != 1 || st.Drops[contract.DropUnknownRPC] == 0 {
		t.Fatalf("forgeries from another host: %d server RPCs, drops %v", st.ServerRPCs, st.Drops)
	}
	forge(clientAP.Addr(), unknown.Append(nil)) // while the handler runs
	n.Run(n.Now() + 25*time.Millisecond)
	forge(clientAP.Addr(), unknown.Append(nil)) // while the response is out
	if !n.RunUntil(func() bool { return got[id] != nil }, n.Now()+time.Second) {
		t.Fatal("RPC never ended")
	}
	if err := got[id].Err; err != nil {
		t.Fatalf("RPC after forged RPC_UNKNOWNs: %v", err)
	}
	if execs[1] != 1 {
		t.Fatalf("request executed %d times", execs[1])
	}
}

// TestPeerTableEvicts: forged sources fill the peer table; once their
// RPCs are over, new hosts get in again (idle peers are evicted), where
// before they were refused for ever.
func TestPeerTableEvicts(t *testing.T) {
	n := sim.New(sim.Config{Seed: 12})
	srv := n.Listen(serverAP, core.Config{Limits: contract.Limits{Peers: 100}})
	echo(srv, n, 0, nil)
	for i := range 1000 {
		src := netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)})
		n.Inject(src, serverAP.Addr(), forgedData(40000, 2, 3000, 0, 1000, 3000))
	}
	n.Run(n.Now() + time.Millisecond)
	if st := srv.Core.Stats(); st.Peers != 100 || st.Drops[contract.DropLimit] != 900 {
		t.Fatalf("%d peers, %d refused; want 100 and 900", st.Peers, st.Drops[contract.DropLimit])
	}
	n.Run(n.Now() + time.Second) // the forged RPCs time out
	cli := n.Listen(clientAP, core.Config{})
	got := collect(cli)
	id := send(t, cli, serverAP, request(1, 100))
	if !n.RunUntil(func() bool { return got[id] != nil }, n.Now()+time.Second) || got[id].Err != nil {
		t.Fatalf("new host after the table filled: %+v", got[id])
	}
	if st := srv.Core.Stats(); st.PeersEvicted == 0 || st.Peers > 100 {
		t.Fatalf("%d peers, %d evicted", st.Peers, st.PeersEvicted)
	}
}

// TestOddPacketsCounted: DATA without payload and packets shorter than a
// common header are dropped and counted.
func TestOddPacketsCounted(t *testing.T) {
	c := core.New(core.Local{Port: serverAP.Port()}, core.Config{})
	var out core.Output
	c.Handle(forgedData(40000, 2, 100, 0, 0, 100), attacker, 0, &out)
	c.Handle(make([]byte, 27), attacker, 0, &out)
	st := c.Stats()
	if st.Drops[contract.DropBadField] != 1 || st.Drops[contract.DropShort] != 1 || st.ServerRPCs != 0 {
		t.Fatalf("drops %v, %d server RPCs; want one bad field, one short, none", st.Drops, st.ServerRPCs)
	}
	if len(out.Packets)+len(out.Messages) != 0 {
		t.Fatalf("odd packets produced output: %+v", out)
	}
}

var _ = errors.Is

// TestResendBudget: forged first packets from 500 hosts, 4 each, start
// RPCs whose hosts never answer. The server asks each host again at most
// once a tick and all of them at most Limits.ResendsPerTick times a
// tick, so its work stays bounded however many silent RPCs it holds;
// every silent RPC still ends in time (its turns waited for are not
// counted against its host), and a real client's RPCs complete
// meanwhile.
func TestResendBudget(t *testing.T) {
	perTick := map[time.Duration]int{}
	var n *sim.Net
	n = sim.New(sim.Config{Seed: 9, Drop: func(src, _ netip.AddrPort, pkt []byte) bool {
		if t, err := wire.PeekType(pkt); src == serverAP && err == nil && t == wire.TypeResend {
			perTick[n.Now()/time.Millisecond]++
		}
		return false
	}})
	const budget = 16
	srv := n.Listen(serverAP, core.Config{Limits: contract.Limits{ResendsPerTick: budget}})
	echo(srv, n, 0, nil)
	const hosts, each = 500, 4
	for h := range hosts {
		src := netip.AddrFrom4([4]byte{10, 1, byte(h >> 8), byte(h)})
		for i := range each {
			n.Inject(src, serverAP.Addr(), forgedData(40000, uint64(2+2*i), 100_000, 0, 1400, 40_000))
		}
	}
	cli := n.Listen(clientAP, core.Config{})
	got := collect(cli)
	for i := range 50 {
		send(t, cli, serverAP, request(uint64(i), 5000))
	}
	if !n.RunUntil(func() bool { return len(got) == 50 }, time.Second) {
		t.Fatalf("%d of 50 real RPCs done after 1 s beside %d silent ones", len(got), hosts*each)
	}
	for _, m := range got {
		if m.Err != nil {
			t.Fatalf("a real RPC failed: %v", m.Err)
		}
	}
	if !n.RunUntil(func() bool { return srv.Core.Stats().IncomingRPCs == 0 }, time.Minute) {
		t.Fatalf("%d silent RPCs left after a minute", srv.Core.Stats().IncomingRPCs)
	}
	most, total := 0, 0
	for _, k := range perTick {
		most = max(most, k)
		total += k
	}
	st := srv.Core.Stats()
	t.Logf("%d RESENDs over %d ticks, at most %d in one; %d waited for a turn; silent RPCs ended after %v",
		total, len(perTick), most, st.ResendsDeferred, n.Now())
	if most > budget {
		t.Errorf("%d RESENDs in one tick, over the budget of %d", most, budget)
	}
	if st.ResendsDeferred == 0 {
		t.Error("no RESEND waited for its turn: the budget was not tested")
	}
	if want := hosts * each * srv.Core.Config().Resend.WithDefaults().TimeoutResends; total < want {
		t.Errorf("%d RESENDs for %d silent RPCs, want each asked %d times before it ended", total, hosts*each, want/(hosts*each))
	}
}
