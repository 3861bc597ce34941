package spec_test

// Conformance tests: each demonstrates one or more requirements of the
// draft through the engine's public API, for requirements no test of the
// engine's own packages shows directly. The catalogue (requirements.txt)
// names them by entry. Endpoints run on the in-memory network; packets
// from peers that do not exist are built with homa/wire and injected
// with HandlePacket, and what an endpoint sends is read from a tap on its
// Conn. Tests that involve the endpoint's timer run in a synctest bubble,
// so that its ticks follow a fake clock and the outcome does not depend
// on the machine's speed.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/wire"
)

// TestOutOfOrderReassembly (HOMA-1.2-1): the three packets of a request
// arrive last first, one of them twice; the server delivers the exact
// message after the last one, without any timer running and without
// asking for anything.
func TestOutOfOrderReassembly(t *testing.T) {
	srv, tp := open(t, newNet(1), serverAddr, serverPort, quiet())
	msg := message(3000)
	const id = 100
	for i, piece := range []uint32{2, 0, 2, 1} {
		off := piece * 1000
		srv.HandlePacket(dataPkt(id, fakePort, serverPort, msg, 3000, off, off+1000), fakeClient)
		if st := srv.Stats(); i < 3 && st.RequestsReceived != 0 {
			t.Fatalf("request delivered after %d of its packets", i+1)
		}
	}
	m, err := srv.Recv(recvCtx(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.Data, msg) || m.ID != id|1 || m.Peer.Port() != fakePort {
		t.Fatalf("request id %d from %v, %d bytes: not the message sent", m.ID, m.Peer, len(m.Data))
	}
	if st := srv.Stats(); st.DuplicatePackets != 1 || st.RequestsReceived != 1 {
		t.Errorf("duplicates %d, requests %d; want 1 and 1", st.DuplicatePackets, st.RequestsReceived)
	}
	if r := tp.since(0, wire.TypeResend); len(r) != 0 {
		t.Errorf("server asked for retransmission: %v", r[0].pkt.String())
	}
}

// doffOffset is where the Doff field sits in the common header (the
// position of TCP's data offset).
const doffOffset = 12

// TestDoffIgnored (HOMA-3-1): requests whose DATA packets carry arbitrary
// Doff values, different in each packet of a message, are received
// exactly as with the value Linux sends.
func TestDoffIgnored(t *testing.T) {
	srv, _ := open(t, newNet(2), serverAddr, serverPort, quiet())
	msg := message(1500)
	for i, doff := range []byte{0x00, 0x10, 0x50, 0xd0, 0xe0, 0xff} {
		id := uint64(200 + 2*i)
		for j, r := range [][2]uint32{{0, 700}, {700, 1500}} {
			b := dataPkt(id, fakePort, serverPort, msg, 1500, r[0], r[1])
			b[doffOffset] = doff ^ byte(0xa5*j)
			var c wire.Common
			if err := wire.ParseCommon(b, &c); err != nil || c.Doff != b[doffOffset] {
				t.Fatalf("byte %d is not the Doff field (%v)", doffOffset, err)
			}
			srv.HandlePacket(b, fakeClient)
		}
		m, err := srv.Recv(recvCtx(t), 0)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m.Data, msg) || m.ID != id|1 {
			t.Fatalf("doff %#x: request %d of %d bytes differs from the message sent", doff, m.ID, len(m.Data))
		}
	}
	if st := srv.Stats(); st.TotalDrops() != 0 || st.RequestsReceived != 6 {
		t.Fatalf("drops %v, requests %d; want none and 6", st.Drops, st.RequestsReceived)
	}
}

// exchange runs RPCs of the given request sizes between two tapped
// endpoints (the server echoes, the response as long as the request) and
// returns the client ids, in order.
func exchange(t *testing.T, client, server *homa.Endpoint, sizes []int) []uint64 {
	t.Helper()
	var ids []uint64
	for _, n := range sizes {
		req := message(n)
		id, err := client.Send(server.LocalAddr(), req, 0)
		if err != nil {
			t.Fatal(err)
		}
		m, err := server.Recv(recvCtx(t), 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := server.Reply(m.Peer.Addr(), m.ID, m.Data); err != nil {
			t.Fatal(err)
		}
		r, err := client.Recv(recvCtx(t), id)
		if err != nil || r.Err != nil || !bytes.Equal(r.Data, req) {
			t.Fatalf("RPC of %d bytes: %v / %+v", n, err, r)
		}
		ids = append(ids, id)
	}
	return ids
}

// TestDataPacketHeaders (HOMA-3.1-1, HOMA-3.1-2): in RPCs of 1 to 141
// packets each way, every DATA packet either side sends has the DATA type
// and the RPC's id (even from the client, odd from the server), every
// packet of a message states the same message length, and together they
// carry the whole message.
func TestDataPacketHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := newNet(3)
		srv, stp := open(t, nw, serverAddr, serverPort, ticking())
		cli, ctp := open(t, nw, clientAddr, 0, ticking())
		sizes := []int{100, 5000, 200_000}
		ids := exchange(t, cli, srv, sizes)
		for _, side := range []struct {
			name string
			tp   *tap
			bit  uint64 // the S bit: 0 from the client, 1 from the server
		}{{"client", ctp, 0}, {"server", stp, 1}} {
			var pkts []sent
			for _, s := range side.tp.all() {
				if s.pkt.Type == wire.TypeData {
					pkts = append(pkts, s)
				}
			}
			for i, id := range ids {
				var mine []sent
				for _, s := range pkts {
					if s.pkt.Data.SenderID == id|side.bit {
						mine = append(mine, s)
					}
				}
				if len(mine) == 0 {
					t.Fatalf("%s: no DATA with id %d", side.name, id|side.bit)
				}
				for _, s := range mine {
					if s.pkt.Data.Type != wire.TypeData || s.pkt.Data.MessageLength != uint32(sizes[i]) {
						t.Errorf("%s: %s; want type DATA and length %d", side.name, s.pkt.String(), sizes[i])
					}
				}
				if got := covered(mine); len(got) != 1 || got[0] != [2]uint32{0, uint32(sizes[i])} {
					t.Errorf("%s: DATA of id %d carries %v of %d bytes", side.name, id|side.bit, got, sizes[i])
				}
			}
			for _, s := range pkts {
				if !slices.Contains(ids, s.pkt.Data.SenderID&^1) || s.pkt.Data.SenderID&1 != side.bit {
					t.Errorf("%s: DATA with id %d, not one of its RPCs %v", side.name, s.pkt.Data.SenderID, ids)
				}
			}
		}
	})
}

// TestControlPacketsTopPriority (HOMA-5.5-1, HOMA-5.2-4): every packet
// other than DATA that an endpoint sends, of all seven types, goes at
// priority 7; among them, the CUTOFFS that answers a stale cutoff version.
func TestControlPacketsTopPriority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := newNet(4)
		srv, stp := open(t, nw, serverAddr, serverPort, ticking())
		cli, ctp := open(t, nw, clientAddr, 0, ticking())
		// GRANTs both ways, and the client's ACK.
		exchange(t, cli, srv, []int{200_000})
		time.Sleep(5 * time.Millisecond)

		// A request with a stale cutoff version (CUTOFFS), a RESEND before
		// its response is ready (BUSY), and no acknowledgment after the
		// response (NEED_ACK).
		msg := message(10)
		stale := dataMsg(300, fakePort, serverPort, msg, 10, 0, 10)
		stale.CutoffVersion = 0
		srv.HandlePacket(stale.Append(nil), fakeClient)
		m, err := srv.Recv(recvCtx(t), 0)
		if err != nil {
			t.Fatal(err)
		}
		srv.HandlePacket(resendPkt(300, fakePort, serverPort, 0, wire.ResendToEnd), fakeClient)
		if err := srv.Reply(m.Peer.Addr(), m.ID, msg); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
		// A RESEND for a request the server never saw (RESEND back), and
		// one for a response the client knows nothing of (RPC_UNKNOWN).
		srv.HandlePacket(resendPkt(302, fakePort, serverPort, 0, wire.ResendToEnd), fakeClient)
		cli.HandlePacket(resendPkt(0x7777, serverPort, cli.Port(), 0, 100), serverAddr)

		seen := map[wire.Type]int{}
		for _, tp := range []*tap{stp, ctp} {
			for _, s := range tp.all() {
				if s.pkt.Type == wire.TypeData {
					continue
				}
				seen[s.pkt.Type]++
				if s.prio != 7 {
					t.Errorf("%s sent at priority %d", s.pkt.String(), s.prio)
				}
			}
		}
		for _, typ := range []wire.Type{wire.TypeGrant, wire.TypeResend, wire.TypeRPCUnknown,
			wire.TypeBusy, wire.TypeCutoffs, wire.TypeNeedAck, wire.TypeAck} {
			if seen[typ] == 0 {
				t.Errorf("no %v packet was sent (sent: %v)", typ, seen)
			}
		}
	})
}

// TestNeedAckAnswered (HOMA-3.7-1, HOMA-7-12, HOMA-7-8): a client answers
// NEED_ACK with an ACK naming the RPC when it does not know the RPC, when
// it aborted it, when the response is complete but not yet taken by the
// application, and after it was taken.
func TestNeedAckAnswered(t *testing.T) {
	cli, tp := open(t, newNet(5), clientAddr, 0, quiet())
	dst := netip.AddrPortFrom(serverAddr, serverPort)
	needAck := func(id uint64) []byte { return bare(wire.TypeNeedAck, id|1, serverPort, cli.Port()) }
	expectAck := func(what string, id uint64, mark int) {
		t.Helper()
		for _, s := range tp.since(mark, wire.TypeAck) {
			if s.dst == serverAddr && acks(&s.pkt.Ack, id, serverPort) {
				return
			}
		}
		t.Errorf("%s: no ACK for RPC %d after NEED_ACK (sent %v)", what, id, tp.since(mark, wire.TypeAck))
	}

	mark := tp.mark()
	cli.HandlePacket(needAck(0x1234), serverAddr)
	expectAck("unknown RPC", 0x1234, mark)

	aborted, err := cli.Send(dst, []byte("never mind"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.Abort(aborted); err != nil {
		t.Fatal(err)
	}
	mark = tp.mark()
	cli.HandlePacket(needAck(aborted), serverAddr)
	expectAck("aborted RPC", aborted, mark)

	id, err := cli.Send(dst, []byte("q"), 0)
	if err != nil {
		t.Fatal(err)
	}
	resp := message(5)
	cli.HandlePacket(dataPkt(id|1, serverPort, cli.Port(), resp, 5, 0, 5), serverAddr)
	mark = tp.mark()
	cli.HandlePacket(needAck(id), serverAddr)
	expectAck("response complete, not yet received", id, mark)

	m, err := cli.Recv(recvCtx(t), id)
	if err != nil || m.Err != nil || !bytes.Equal(m.Data, resp) {
		t.Fatalf("response: %v / %+v", err, m)
	}
	mark = tp.mark()
	cli.HandlePacket(needAck(id), serverAddr)
	expectAck("response received", id, mark)
}

// TestNeedAckIncompleteResponse (HOMA-7-13, HOMA-3.7-2, HOMA-6.1-1): a
// client holding part of a response does not answer NEED_ACK with an
// ACK; it asks for the missing bytes with RESEND (from its loss timer),
// and acknowledges once the response is complete.
func TestNeedAckIncompleteResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cli, tp := open(t, newNet(6), clientAddr, 0, ticking())
		id, err := cli.Send(netip.AddrPortFrom(serverAddr, serverPort), []byte("q"), 0)
		if err != nil {
			t.Fatal(err)
		}
		resp := message(3000)
		cli.HandlePacket(dataPkt(id|1, serverPort, cli.Port(), resp, 3000, 0, 1000), serverAddr)
		mark := tp.mark()
		cli.HandlePacket(bare(wire.TypeNeedAck, id|1, serverPort, cli.Port()), serverAddr)
		time.Sleep(10 * time.Millisecond) // ten ticks: loss detection's turn
		for _, s := range tp.since(0, wire.TypeAck) {
			if acks(&s.pkt.Ack, id, serverPort) {
				t.Fatalf("ACK for an RPC whose response is incomplete: %s", s.pkt.String())
			}
		}
		var asked bool
		for _, s := range tp.since(mark, wire.TypeResend) {
			r := s.pkt.Resend
			if r.SenderID != id || s.dst != serverAddr || r.DstPort != serverPort {
				t.Errorf("RESEND for another RPC: %s", s.pkt.String())
			}
			asked = asked || (r.Offset == 1000 && r.Length == 2000)
		}
		if !asked {
			t.Fatalf("no RESEND for bytes 1000..3000 of the response: %v", tp.since(mark, wire.TypeResend))
		}

		cli.HandlePacket(dataPkt(id|1, serverPort, cli.Port(), resp, 3000, 1000, 3000), serverAddr)
		mark = tp.mark()
		cli.HandlePacket(bare(wire.TypeNeedAck, id|1, serverPort, cli.Port()), serverAddr)
		var acked bool
		for _, s := range tp.since(mark, wire.TypeAck) {
			acked = acked || acks(&s.pkt.Ack, id, serverPort)
		}
		if !acked {
			t.Fatal("no ACK once the response was complete")
		}
		if m, err := cli.Recv(recvCtx(t), id); err != nil || !bytes.Equal(m.Data, resp) {
			t.Fatalf("response: %v / %+v", err, m)
		}
	})
}

// TestGrantsFavorShorter (HOMA-4.2-1): with one message granted at a
// time, a server granting a 500,000-byte request switches its grants to a
// 300,000-byte request from another host as soon as that one starts, and
// to a 100,000-byte one after that.
func TestGrantsFavorShorter(t *testing.T) {
	cfg := quiet()
	cfg.Grant.MaxOvercommit = 1
	// A fixed window keeps total incoming below its limit, so that each
	// new message finds room to be granted.
	cfg.Grant.Window = 20_000
	srv, tp := open(t, newNet(7), serverAddr, serverPort, cfg)
	hosts := []struct {
		id     uint64
		host   string
		length int
	}{{300, "10.0.0.2", 500_000}, {400, "10.0.0.3", 300_000}, {500, "10.0.0.4", 100_000}}
	for _, h := range hosts {
		mark := tp.mark()
		msg := message(h.length)
		srv.HandlePacket(dataPkt(h.id, fakePort, serverPort, msg, 10_000, 0, 1000), netip.MustParseAddr(h.host))
		grants := tp.since(mark, wire.TypeGrant)
		if len(grants) == 0 {
			t.Fatalf("no GRANT after the %d-byte request started", h.length)
		}
		for _, g := range grants {
			if g.pkt.Grant.SenderID != h.id|1 || g.dst != netip.MustParseAddr(h.host) {
				t.Errorf("after the %d-byte request started: %s to %v; want grants for id %d only",
					h.length, g.pkt.String(), g.dst, h.id|1)
			}
		}
	}
}

// TestGrantPriorityUsed (HOMA-5.1-1, HOMA-3.6-1): a client sends the
// unscheduled part of a 200,000-byte request at the priority the default
// cutoffs give its length, and each granted part at the priority of the
// GRANT that allowed it.
func TestGrantPriorityUsed(t *testing.T) {
	cli, tp := open(t, newNet(8), clientAddr, 0, quiet())
	id, err := cli.Send(netip.AddrPortFrom(serverAddr, serverPort), message(200_000), 0)
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, from int, lo, hi uint32, prio uint8) {
		t.Helper()
		pkts := tp.since(from, wire.TypeData)
		if got := covered(pkts); len(got) != 1 || got[0] != [2]uint32{lo, hi} {
			t.Fatalf("%s: sent %v, want [%d %d]", what, got, lo, hi)
		}
		for _, s := range pkts {
			if s.prio != prio {
				t.Errorf("%s: DATA at offset %d with priority %d, want %d", what, s.pkt.Data.Offset(), s.prio, prio)
			}
		}
	}
	// Linux's default cutoffs: lengths up to 1,000,000 bytes at level 4.
	check("unscheduled", 0, 0, 40_000, 4)
	grant := func(offset uint32, prio uint8) int {
		mark := tp.mark()
		g := wire.Grant{Common: wire.Common{SrcPort: serverPort, DstPort: cli.Port(), SenderID: id | 1}, Offset: offset, Priority: prio}
		cli.HandlePacket(g.Append(nil), serverAddr)
		return mark
	}
	// The segment that holds the last granted byte goes whole (Linux's
	// cuts: from the unscheduled limit on, at multiples of the segment).
	seg := uint32(len(tp.since(0, wire.TypeData)[0].pkt.Data.Payload))
	end := 40_000 + (60_000+seg-1)/seg*seg
	check("after GRANT to 100,000 at 2", grant(100_000, 2), 40_000, end, 2)
	check("after GRANT to 200,000 at 1", grant(200_000, 1), end, 200_000, 1)
}

// TestClientResendsBeforeRequestSent (HOMA-6.1-2, HOMA-6.1-1): a client
// whose 200,000-byte request is stuck after its unscheduled part (the
// server never grants) asks for the whole response with RESEND, and keeps
// asking until it gives up on the server.
func TestClientResendsBeforeRequestSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cli, tp := open(t, newNet(9), clientAddr, 0, ticking())
		id, err := cli.Send(netip.AddrPortFrom(serverAddr, serverPort), message(200_000), 0)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
		if got := covered(tp.since(0, wire.TypeData)); len(got) != 1 || got[0][1] >= 200_000 {
			t.Fatalf("request sent as %v: the test needs it incomplete", got)
		}
		resends := tp.since(0, wire.TypeResend)
		if len(resends) == 0 {
			t.Fatal("no RESEND while the request is incomplete")
		}
		for _, s := range resends {
			r := s.pkt.Resend
			if r.SenderID != id || r.DstPort != serverPort || s.dst != serverAddr || r.Offset != 0 || r.Length != wire.ResendToEnd {
				t.Errorf("%s; want a RESEND of the whole response of RPC %d", s.pkt.String(), id)
			}
		}
		m, err := cli.Recv(recvCtx(t), id)
		if err != nil || !errors.Is(m.Err, contract.ErrPeerTimeout) {
			t.Fatalf("RPC to a silent server: %v / %+v, want ErrPeerTimeout", err, m)
		}
	})
}

// TestNoResendWhileRequestUnsent (HOMA-6.2-1): a client pacing its
// request at 10 Mbit/s has its unscheduled bytes queued for about 34 ms.
// It sends no RESEND for the response until the last of them has left,
// then starts asking.
func TestNoResendWhileRequestUnsent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := ticking()
		cfg.LinkMbps = 10
		cli, tp := open(t, newNet(10), clientAddr, 0, cfg)
		if _, err := cli.Send(netip.AddrPortFrom(serverAddr, serverPort), message(200_000), 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(60 * time.Millisecond)
		resends := tp.since(0, wire.TypeResend)
		if len(resends) == 0 {
			t.Fatalf("no RESEND in 60 ms; request sent as %v", covered(tp.since(0, wire.TypeData)))
		}
		var before []sent // the DATA written before the first RESEND
		for _, s := range tp.since(0, wire.TypeData) {
			if s.seq < resends[0].seq {
				before = append(before, s)
			}
		}
		if got := covered(before); len(got) != 1 || got[0] != [2]uint32{0, 40_000} {
			t.Fatalf("first RESEND sent when the request's unscheduled bytes %v of [0 40000] had gone out", got)
		}
	})
}

// TestServerResendsForRequest (HOMA-6.1-3 to HOMA-6.1-5): a server missing
// the middle packet of a request asks for exactly that range from its own
// timer, and delivers the request once it comes.
func TestServerResendsForRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, tp := open(t, newNet(11), serverAddr, serverPort, ticking())
		msg := message(3000)
		for _, off := range []uint32{0, 2000} {
			srv.HandlePacket(dataPkt(500, fakePort, serverPort, msg, 3000, off, off+1000), fakeClient)
		}
		time.Sleep(10 * time.Millisecond)
		resends := tp.since(0, wire.TypeResend)
		if len(resends) == 0 {
			t.Fatal("no RESEND for the missing part of the request")
		}
		for _, s := range resends {
			r := s.pkt.Resend
			if r.SenderID != 501 || r.DstPort != fakePort || s.dst != fakeClient || r.Offset != 1000 || r.Length != 1000 {
				t.Errorf("%s to %v; want RESEND id 501 offset 1000 length 1000 to the client", s.pkt.String(), s.dst)
			}
		}
		srv.HandlePacket(dataPkt(500, fakePort, serverPort, msg, 3000, 1000, 2000), fakeClient)
		m, err := srv.Recv(recvCtx(t), 0)
		if err != nil || !bytes.Equal(m.Data, msg) {
			t.Fatalf("request: %v / %+v", err, m)
		}
	})
}

// TestServerAsksForUnknownRequest (HOMA-6.1-4, HOMA-6.1-6, HOMA-6.3-5): a
// RESEND from a client for an RPC the server has never seen (every
// request packet lost) makes the server ask for the request from its
// start; the client's retransmission then starts the RPC.
func TestServerAsksForUnknownRequest(t *testing.T) {
	srv, tp := open(t, newNet(12), serverAddr, serverPort, quiet())
	srv.HandlePacket(resendPkt(600, fakePort, serverPort, 0, wire.ResendToEnd), fakeClient)
	resends := tp.since(0, wire.TypeResend)
	if len(resends) != 1 {
		t.Fatalf("%d RESENDs in answer, want 1", len(resends))
	}
	if s := resends[0]; s.pkt.Resend.SenderID != 601 || s.pkt.Resend.DstPort != fakePort || s.dst != fakeClient ||
		s.pkt.Resend.Offset != 0 || s.pkt.Resend.Length == 0 {
		t.Fatalf("answer %s to %v; want a RESEND from offset 0 for id 601", s.pkt.String(), s.dst)
	}
	msg := message(100)
	d := dataMsg(600, fakePort, serverPort, msg, 100, 0, 100)
	d.Retransmit = 1 // sent in answer to the server's RESEND
	srv.HandlePacket(d.Append(nil), fakeClient)
	if m, err := srv.Recv(recvCtx(t), 0); err != nil || !bytes.Equal(m.Data, msg) {
		t.Fatalf("request after the server asked for it: %v / %+v", err, m)
	}
}

// TestResendAnswered (HOMA-6.3-1 to HOMA-6.3-6): every RESEND gets an
// answer: a server with no response yet says BUSY, whether its request
// is still arriving (as Linux's homa_resend_pkt: the server's own loss
// detection asks for what it misses) or its application has not
// replied; one that has replied
// sends the range again, each packet flagged as retransmitted; a client
// that does not know the RPC says RPC_UNKNOWN; a client asked for part of
// its request sends it again, flagged.
func TestResendAnswered(t *testing.T) {
	nw := newNet(13)
	srv, stp := open(t, nw, serverAddr, serverPort, quiet())
	cli, ctp := open(t, nw, clientAddr, 0, quiet())
	answer := func(e *homa.Endpoint, tp *tap, pkt []byte, from netip.Addr) []sent {
		t.Helper()
		mark := tp.mark()
		e.HandlePacket(pkt, from)
		out := tp.all()[mark:]
		if len(out) == 0 {
			t.Fatalf("no answer to %s", mustParse(pkt))
		}
		return out
	}
	only := func(what string, got []sent, typ wire.Type, id uint64) {
		t.Helper()
		for _, s := range got {
			if s.pkt.Type != typ || header(&s.pkt).SenderID != id {
				t.Errorf("%s: answered with %s; want %v for id %d", what, s.pkt.String(), typ, id)
			}
		}
	}

	req := message(2000)
	srv.HandlePacket(dataPkt(700, fakePort, serverPort, req, 2000, 0, 1000), fakeClient)
	got := answer(srv, stp, resendPkt(700, fakePort, serverPort, 0, wire.ResendToEnd), fakeClient)
	only("request incomplete", got, wire.TypeBusy, 701)

	srv.HandlePacket(dataPkt(700, fakePort, serverPort, req, 2000, 1000, 2000), fakeClient)
	m, err := srv.Recv(recvCtx(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	got = answer(srv, stp, resendPkt(700, fakePort, serverPort, 0, wire.ResendToEnd), fakeClient)
	only("response not ready", got, wire.TypeBusy, 701)

	mark := stp.mark()
	if err := srv.Reply(m.Peer.Addr(), m.ID, message(5000)); err != nil {
		t.Fatal(err)
	}
	for _, s := range stp.since(mark, wire.TypeData) {
		if s.pkt.Data.Retransmit != 0 {
			t.Errorf("first transmission flagged as retransmitted: %s", s.pkt.String())
		}
	}
	got = answer(srv, stp, resendPkt(700, fakePort, serverPort, 1000, 2000), fakeClient)
	only("response sent", got, wire.TypeData, 701)
	// Whole segments, cut as the first transmission was (a Linux
	// receiver drops a packet that overlaps bytes it has).
	seg := uint32(len(got[0].pkt.Data.Payload))
	checkRetransmitted(t, "response", got, 1000/seg*seg, min((3000+seg-1)/seg*seg, 5000))

	got = answer(cli, ctp, resendPkt(0x7777, serverPort, cli.Port(), 0, 100), serverAddr)
	only("client, unknown RPC", got, wire.TypeRPCUnknown, 0x7776)

	id, err := cli.Send(netip.AddrPortFrom(serverAddr, serverPort), message(3000), 0)
	if err != nil {
		t.Fatal(err)
	}
	got = answer(cli, ctp, resendPkt(id|1, serverPort, cli.Port(), 1000, 1000), serverAddr)
	only("client, request", got, wire.TypeData, id)
	checkRetransmitted(t, "request", got, 1000/seg*seg, min((2000+seg-1)/seg*seg, 3000))
}

// checkRetransmitted checks that the DATA packets carry exactly bytes
// [lo, hi) and are all flagged as retransmissions.
func checkRetransmitted(t *testing.T, what string, pkts []sent, lo, hi uint32) {
	t.Helper()
	if got := covered(pkts); len(got) != 1 || got[0] != [2]uint32{lo, hi} {
		t.Errorf("%s: retransmitted %v, want [%d %d]", what, got, lo, hi)
	}
	for _, s := range pkts {
		if s.pkt.Data.Retransmit == 0 {
			t.Errorf("%s: retransmitted DATA without the Retrans flag: %s", what, s.pkt.String())
		}
	}
}

// TestTimeoutKeepsPeerCutoffs (HOMA-6.4-2, HOMA-3.6-1, HOMA-3.6-2): the cutoffs a
// server sent survive its timeout: the next request to it still carries
// their version and the priority they give its length.
func TestTimeoutKeepsPeerCutoffs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cli, tp := open(t, newNet(14), clientAddr, 0, ticking())
		dst := netip.AddrPortFrom(serverAddr, serverPort)
		id, err := cli.Send(dst, message(150), 0)
		if err != nil {
			t.Fatal(err)
		}
		// Default cutoffs: 150 bytes at priority 7, version 1.
		first := tp.since(0, wire.TypeData)
		if len(first) != 1 || first[0].prio != 7 || first[0].pkt.Data.CutoffVersion != 1 {
			t.Fatalf("first request: %v", first)
		}
		c := wire.Cutoffs{Common: wire.Common{SrcPort: serverPort, DstPort: cli.Port(), SenderID: id | 1},
			Cutoffs: [8]uint32{0, 0, 0, 0, 0, 1_000_000, 2_000, 100}, Version: 9}
		cli.HandlePacket(c.Append(nil), serverAddr)
		m, err := cli.Recv(recvCtx(t), id)
		if err != nil || !errors.Is(m.Err, contract.ErrPeerTimeout) {
			t.Fatalf("RPC to a silent server: %v / %+v, want ErrPeerTimeout", err, m)
		}
		mark := tp.mark()
		if _, err := cli.Send(dst, message(150), 0); err != nil {
			t.Fatal(err)
		}
		next := tp.since(mark, wire.TypeData)
		if len(next) != 1 || next[0].prio != 6 || next[0].pkt.Data.CutoffVersion != 9 {
			t.Fatalf("request after the timeout: %v; want priority 6 and cutoff version 9", next)
		}
		if n := cli.Stats().PeerTimeouts; n != 1 {
			t.Fatalf("%d peer timeouts, want 1", n)
		}
	})
}

// TestServerKeepsStateUntilAcked (HOMA-7-5, HOMA-7-11, HOMA-7-15,
// HOMA-7-3): a server that has answered a request keeps the RPC and
// repeats NEED_ACK, tick after tick, until the client acknowledges; then
// it forgets the RPC, stops asking, and a late copy of the request does
// not run it again.
func TestServerKeepsStateUntilAcked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, tp := open(t, newNet(15), serverAddr, serverPort, ticking())
		req := dataPkt(900, fakePort, serverPort, message(10), 10, 0, 10)
		srv.HandlePacket(req, fakeClient)
		m, err := srv.Recv(recvCtx(t), 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Reply(m.Peer.Addr(), m.ID, []byte("resp")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		needs := tp.since(0, wire.TypeNeedAck)
		if len(needs) < 3 {
			t.Fatalf("%d NEED_ACKs in 20 ticks without acknowledgment, want them repeated", len(needs))
		}
		for _, s := range needs {
			if s.pkt.Common.SenderID != 901 || s.dst != fakeClient || s.pkt.Common.DstPort != fakePort {
				t.Errorf("%s to %v; want NEED_ACK id 901 to the client", s.pkt.String(), s.dst)
			}
		}
		if st := srv.Stats(); st.ServerRPCs != 1 {
			t.Fatalf("server holds %d RPCs before the acknowledgment, want 1", st.ServerRPCs)
		}

		a := wire.Ack{Common: wire.Common{SrcPort: fakePort, DstPort: serverPort, SenderID: 900}}
		srv.HandlePacket(a.Append(nil), fakeClient)
		if st := srv.Stats(); st.ServerRPCs != 0 || st.ServerRPCsFreed != 1 {
			t.Fatalf("after the ACK: %d RPCs held, %d freed; want 0 and 1", st.ServerRPCs, st.ServerRPCsFreed)
		}
		// A NEED_ACK the timer decided on just before the ACK may still
		// be on its way out: look only from the next tick on.
		time.Sleep(2 * time.Millisecond)
		mark := tp.mark()
		time.Sleep(10 * time.Millisecond)
		if n := len(tp.since(mark, wire.TypeNeedAck)); n != 0 {
			t.Errorf("%d NEED_ACKs after the acknowledgment", n)
		}

		srv.HandlePacket(req, fakeClient)
		if st := srv.Stats(); st.RequestsReceived != 1 || st.Drops[contract.DropStale] != 1 {
			t.Fatalf("late copy of the request: %d requests, %d stale drops; want 1 and 1",
				st.RequestsReceived, st.Drops[contract.DropStale])
		}
	})
}

// TestServerDropsIncompleteRequest (HOMA-7-4): a server holding half a
// request whose client stops answering RESENDs forgets the RPC, without
// the application ever seeing it.
func TestServerDropsIncompleteRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, _ := open(t, newNet(16), serverAddr, serverPort, ticking())
		srv.HandlePacket(dataPkt(1000, fakePort, serverPort, message(2000), 2000, 0, 1000), fakeClient)
		if n := srv.Stats().ServerRPCs; n != 1 {
			t.Fatalf("%d server RPCs for a partial request, want 1", n)
		}
		time.Sleep(200 * time.Millisecond)
		if st := srv.Stats(); st.ServerRPCs != 0 || st.RequestsReceived != 0 || st.ResendsSent == 0 {
			t.Fatalf("after 200 ticks: %d RPCs, %d requests delivered, %d RESENDs; want 0, 0, some",
				st.ServerRPCs, st.RequestsReceived, st.ResendsSent)
		}
	})
}

// TestAcknowledgments (HOMA-7-6 to HOMA-7-10): a client acknowledges each
// completed RPC once: in the next request to the same server port when
// there is one, otherwise in an ACK packet a tick later; the server frees
// each RPC when its acknowledgment arrives.
func TestAcknowledgments(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := newNet(17)
		srv, _ := open(t, nw, serverAddr, serverPort, ticking())
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				m, err := srv.Recv(context.Background(), 0)
				if err != nil {
					return
				}
				_ = srv.Reply(m.Peer.Addr(), m.ID, m.Data)
			}
		}()
		defer func() { srv.Close(); <-done }()

		// A client whose timer never fires: acknowledgments can only ride
		// on its requests.
		cli, tp := open(t, nw, clientAddr, 0, quiet())
		call := func(e *homa.Endpoint, n int) uint64 {
			t.Helper()
			id, err := e.Send(srv.LocalAddr(), message(n), 0)
			if err != nil {
				t.Fatal(err)
			}
			if m, err := e.Recv(recvCtx(t), id); err != nil || m.Err != nil {
				t.Fatalf("RPC: %v / %+v", err, m)
			}
			return id
		}
		ids := []uint64{call(cli, 10), call(cli, 10), call(cli, 10)}
		carried := map[uint64]int{}
		for _, s := range tp.since(0, wire.TypeData) {
			d := s.pkt.Data
			if d.Ack.ClientID == 0 {
				continue
			}
			carried[d.Ack.ClientID]++
			if d.Ack.ServerPort != serverPort {
				t.Errorf("piggybacked acknowledgment for server port %d: %s", d.Ack.ServerPort, s.pkt.String())
			}
			if i := slices.Index(ids, d.SenderID); i < 1 || d.Ack.ClientID != ids[i-1] {
				t.Errorf("request %d acknowledges %d; want the previous RPC", d.SenderID, d.Ack.ClientID)
			}
		}
		if carried[ids[0]] != 1 || carried[ids[1]] != 1 {
			t.Errorf("piggybacked acknowledgments %v; want RPCs %d and %d once each", carried, ids[0], ids[1])
		}
		if n := srv.Stats().ServerRPCsFreed; n < 2 {
			t.Errorf("server freed %d RPCs, want the 2 acknowledged", n)
		}

		// A client with a timer and nothing more to send: an ACK packet.
		cli2, tp2 := open(t, nw, clientAddr, 0, ticking())
		id := call(cli2, 10)
		time.Sleep(5 * time.Millisecond)
		var explicit int
		for _, s := range tp2.since(0, wire.TypeAck) {
			if s.dst == serverAddr && acks(&s.pkt.Ack, id, serverPort) {
				explicit++
			}
		}
		if explicit != 1 {
			t.Errorf("%d ACK packets for RPC %d, want 1", explicit, id)
		}
	})
}

func mustParse(b []byte) string {
	var p wire.Packet
	if err := p.Parse(b); err != nil {
		return fmt.Sprintf("unparsable packet (%v)", err)
	}
	return p.String()
}
