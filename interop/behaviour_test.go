package interop

// Behaviour vectors: each test replays one or more captures of the Linux
// module (testdata/linux-captures) against a homa.Endpoint on the
// in-memory network. The endpoint takes the module's place, at the
// module's address; the test plays the raw-socket peer, sending what the
// capture shows that peer sending, and checks that the endpoint answers
// with the packet types and fields the module answered with. Timing is
// not checked, only the protocol: where the endpoint legitimately differs
// from the module, the test says so and checks what the protocol needs.

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/wire"
)

// expectMessage receives a message of at most unsched bytes that the
// engine sends to the peer under id, and checks every DATA packet: the
// header, the message length, the incoming field (all of the message is
// unscheduled), the piggybacked ack, no retransmit flag, segments that
// fit the MTU, and the bytes.
func (s *scene) expectMessage(id uint64, want []byte, ack wire.AckEntry) []rxPacket {
	s.t.Helper()
	var m message
	var pkts []rxPacket
	for !m.complete() {
		rp, others := s.peer.expect(wire.TypeData)
		for _, o := range others {
			s.t.Errorf("unexpected while the engine sends a message: %s", o.String())
		}
		d := &rp.Data
		s.checkHeader(rp, id)
		if d.MessageLength != uint32(len(want)) || d.Incoming != uint32(len(want)) || d.Retransmit != 0 || len(d.Payload) > segment {
			s.t.Errorf("DATA of a %d-byte message: %s", len(want), rp.String())
		}
		if len(pkts) == 0 && d.Ack != ack {
			s.t.Errorf("first DATA piggybacks ack %v, want %v", d.Ack, ack)
		}
		if len(pkts) > 0 && d.Ack.ClientID != 0 && d.Ack != ack {
			s.t.Errorf("DATA piggybacks ack %v", d.Ack)
		}
		if err := m.add(d); err != nil {
			s.t.Fatal(err)
		}
		pkts = append(pkts, rp)
	}
	if !bytes.Equal(m.buf, want) {
		s.t.Errorf("the %d-byte message arrived with other bytes", len(want))
	}
	return pkts
}

// ackOnce sends the ACK the raw peer sent in the captures and waits until
// the engine has freed the RPC.
func (s *scene) ackOnce(ack []byte, freed uint64) {
	s.t.Helper()
	s.peer.send(ack)
	s.waitStats("server RPC freed after the ACK", func(st contract.Stats) bool {
		return st.ServerRPCsFreed == freed && st.ServerRPCs == 0
	})
	s.peer.drain(2 * time.Millisecond)
}

// simulated runs a subtest in a synctest bubble, as every behaviour test
// runs: the engine's timers, the in-memory network and the test's waits
// all keep the bubble's clock, which moves only when every goroutine of
// the test is blocked. A window of quiet is then so many milliseconds of
// the engine's ticks, whatever the load of the machine: every packet the
// engine sends in it arrives before it closes.
func simulated(f func(t *testing.T)) func(t *testing.T) {
	return func(t *testing.T) { synctest.Test(t, f) }
}

// isNeedAck reports whether rp is a NEED_ACK for id.
func isNeedAck(id uint64) func(rxPacket) bool {
	return func(rp rxPacket) bool { return rp.Type == wire.TypeNeedAck && rp.Common.SenderID == id }
}

// TestNeedAckUntilAck replays capture 01: a 100-byte request is echoed,
// the server asks for the acknowledgment with NEED_ACK, the client's ACK
// (num_acks=1) frees the RPC and the NEED_ACKs stop. Twice, as in the
// capture.
func TestNeedAckUntilAck(t *testing.T) { synctest.Test(t, needAckUntilAck) }

func needAckUntilAck(t *testing.T) {
	s := newServerScene(t, homa.Config{})
	for i, id := range []uint64{1000, 1002} {
		req := pattern(100, byte(i))
		s.peer.send(s.packets(dataSpec{id: id, msg: req, cutoffVer: linuxVersion}, 0, len(req))...)
		// The module's DATA carries cutoff_ver=0 (it never had CUTOFFS
		// from the peer); the engine assumes Linux's default version 1
		// for such a peer, which a Linux receiver accepts without sending
		// CUTOFFS. The field is not checked.
		s.expectMessage(id|1, req, wire.AckEntry{})
		na, others := s.peer.expect(wire.TypeNeedAck)
		s.checkHeader(na, id|1)
		for _, o := range others {
			t.Errorf("before NEED_ACK: %s", o.String())
		}
		s.ackOnce(s.ack(id, wire.AckEntry{ClientID: id, ServerPort: moduleServerPort}), uint64(i+1))
		s.peer.quiet("NEED_ACK after the ACK", isNeedAck(id|1))
	}
}

// TestNeedAckRepeats replays capture 06: a client that never acknowledges
// gets NEED_ACK again and again (the module: every tick, with no limit).
// The engine repeats it every tick too, until Config.Ack.ReclaimTicks
// (2 s) of silence; the test watches the first 20 and then acknowledges.
func TestNeedAckRepeats(t *testing.T) { synctest.Test(t, needAckRepeats) }

func needAckRepeats(t *testing.T) {
	s := newServerScene(t, homa.Config{})
	const id = 6000
	req := pattern(100, 6)
	s.peer.send(s.packets(dataSpec{id: id, msg: req, cutoffVer: linuxVersion}, 0, len(req))...)
	s.expectMessage(id|1, req, wire.AckEntry{})
	for range 20 {
		na, others := s.peer.expect(wire.TypeNeedAck)
		s.checkHeader(na, id|1)
		for _, o := range others {
			t.Errorf("between NEED_ACKs: %s", o.String())
		}
	}
	s.ackOnce(s.ack(id), 1) // num_acks=0: the id in the header acknowledges
	s.peer.quiet("NEED_ACK after the ACK", isNeedAck(id|1))
}

// TestWithheldRequestPacket replays capture 04: the second packet of a
// 5000-byte request is withheld; the server asks for exactly that range
// with a RESEND at priority 7, and the retransmission (retransmit=1)
// completes the request. The response follows, then NEED_ACK, answered by
// an ACK with num_acks=0 as in the capture.
func TestWithheldRequestPacket(t *testing.T) { synctest.Test(t, withheldRequestPacket) }

func withheldRequestPacket(t *testing.T) {
	s := newServerScene(t, homa.Config{})
	const id = 4000
	req := pattern(5000, 4)
	spec := dataSpec{id: id, msg: req, cutoffVer: linuxVersion}
	pkts := s.packets(spec, 0, len(req))
	if len(pkts) != 4 {
		t.Fatalf("%d packets, the capture has 4", len(pkts))
	}
	s.peer.send(pkts[0], pkts[2], pkts[3])
	rs, others := s.peer.expect(wire.TypeResend)
	for _, o := range others {
		t.Errorf("before the RESEND: %s", o.String())
	}
	s.checkHeader(rs, id|1)
	if r := rs.Resend; r.Offset != segment || r.Length != segment || r.Priority != controlPriority {
		t.Errorf("RESEND for the withheld packet: %s; want offset 1424 length 1424 priority 7", rs.String())
	}
	spec.retransmit = true
	s.peer.send(s.packets(spec, segment, 2*segment)...)
	resp := s.expectMessage(id|1, req, wire.AckEntry{})
	// The module segments the response from one send (sequence 0, doff
	// 0xd0); the engine puts each packet's offset in both fields, which
	// WIRE.md says every receiver understands. Offsets are checked.
	var offsets []uint32
	for _, p := range resp {
		offsets = append(offsets, p.Data.Offset())
	}
	if !equalSets(offsets, []uint32{0, 1424, 2848, 4272}) {
		t.Errorf("response offsets %v, want 0 1424 2848 4272", offsets)
	}
	na, _ := s.peer.expect(wire.TypeNeedAck)
	s.checkHeader(na, id|1)
	s.ackOnce(s.ack(id), 1)
}

// equalSets reports whether a and b hold the same values, in any order.
func equalSets(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	count := map[uint32]int{}
	for _, v := range a {
		count[v]++
	}
	for _, v := range b {
		count[v]--
	}
	for _, n := range count {
		if n != 0 {
			return false
		}
	}
	return true
}

// TestStaleCutoffVersion replays capture 05: a request whose DATA carries
// cutoff version 0 is answered with CUTOFFS holding the receiver's
// cutoffs, [0, 0, 0, 0, 1000000, 15000, 2800, 200] version 1 in the
// capture (the engine starts from the same Linux defaults). A request
// that carries the current version gets no CUTOFFS.
func TestStaleCutoffVersion(t *testing.T) { synctest.Test(t, staleCutoffVersion) }

func staleCutoffVersion(t *testing.T) {
	s := newServerScene(t, homa.Config{})
	const id = 5000
	req := pattern(100, 5)
	s.peer.send(s.packets(dataSpec{id: id, msg: req, cutoffVer: 0}, 0, len(req))...)
	c, others := s.peer.expect(wire.TypeCutoffs)
	for _, o := range others {
		t.Errorf("before CUTOFFS: %s", o.String())
	}
	s.checkHeader(c, id|1)
	want := [8]uint32{0, 0, 0, 0, 1_000_000, 15_000, 2800, 200}
	if c.Cutoffs.Cutoffs != want || c.Cutoffs.Version != linuxVersion {
		t.Errorf("CUTOFFS: %s; want %v version 1", c.String(), want)
	}
	s.expectMessage(id|1, req, wire.AckEntry{})
	na, _ := s.peer.expect(wire.TypeNeedAck)
	s.checkHeader(na, id|1)
	s.ackOnce(s.ack(id), 1)

	// Now the peer uses the version it was told: no CUTOFFS before the
	// response (the engine would send it while handling the request).
	const id2 = 5002
	s.peer.send(s.packets(dataSpec{id: id2, msg: req, cutoffVer: c.Cutoffs.Version}, 0, len(req))...)
	s.expectMessage(id2|1, req, wire.AckEntry{})
}

// TestResendUnknownRPC replays capture 07. A client's RESEND for an RPC
// the server does not know: the module answers RPC_UNKNOWN. The draft
// lets a server that has received nothing of a request answer with a
// RESEND for it instead, and the engine does. Both make a live client
// send its request again from the start, so the test accepts either and
// then checks that the retransmitted request is served. A server's
// RESEND for a client RPC the engine does not know gets RPC_UNKNOWN, as
// from the module.
func TestResendUnknownRPC(t *testing.T) {
	t.Run("client's RESEND to the server", simulated(func(t *testing.T) {
		s := newServerScene(t, homa.Config{})
		const id = 7000
		s.peer.send(s.resend(id, 0, 100, 0))
		rp, ok := s.peer.next(waitFor)
		if !ok {
			t.Fatal("no answer to a RESEND for an unknown RPC")
		}
		s.checkHeader(rp, id|1)
		switch rp.Type {
		case wire.TypeRPCUnknown: // as the module
		case wire.TypeResend: // as the draft allows
			if rp.Resend.Offset != 0 || rp.Resend.Length == 0 {
				t.Errorf("RESEND for the request: %s; want it from offset 0", rp.String())
			}
		default:
			t.Fatalf("answer to a RESEND for an unknown RPC: %s; want RPC_UNKNOWN or RESEND", rp.String())
		}
		req := pattern(100, 7)
		s.peer.send(s.packets(dataSpec{id: id, msg: req, cutoffVer: linuxVersion, retransmit: true}, 0, len(req))...)
		s.expectMessage(id|1, req, wire.AckEntry{})
		if st := s.ep.Stats(); st.RequestsReceived != 1 {
			t.Errorf("%d requests served, want 1", st.RequestsReceived)
		}
	}))
	t.Run("server's RESEND to the client", simulated(func(t *testing.T) {
		s := newClientScene(t, homa.Config{})
		const id = 7001
		s.peer.send(s.resend(id, 0, 100, controlPriority))
		rp, _ := s.peer.expect(wire.TypeRPCUnknown)
		s.checkHeader(rp, id^1)
	}))
}

// TestPiggybackedAcks replays capture 14: a client that never sends ACK
// packets acknowledges each RPC in the DATA of its next request. The
// server frees each RPC when the acknowledgment arrives, and asks with
// NEED_ACK only about the last one (the capture ends with that NEED_ACK).
func TestPiggybackedAcks(t *testing.T) { synctest.Test(t, piggybackedAcks) }

func piggybackedAcks(t *testing.T) {
	s := newServerScene(t, homa.Config{})
	ids := []uint64{1400, 1402, 1404}
	var ack wire.AckEntry
	for i, id := range ids {
		req := pattern(100, byte(14+i))
		s.peer.send(s.packets(dataSpec{id: id, msg: req, cutoffVer: linuxVersion, ack: ack}, 0, len(req))...)
		var m message
		for !m.complete() { // NEED_ACKs for the previous RPC may come first
			rp, _ := s.peer.expect(wire.TypeData)
			s.checkHeader(rp, id|1)
			if err := m.add(&rp.Data); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(m.buf, req) {
			t.Errorf("response %d: wrong bytes", i)
		}
		// The engine applies a piggybacked ack when it goes idle
		// (core's deferAck), which may be after the response went out:
		// wait until it is idle, then the request's ack has freed the
		// RPC before.
		synctest.Wait()
		if st := s.ep.Stats(); st.ServerRPCsFreed != uint64(i) || st.ServerRPCs != 1 {
			t.Errorf("after request %d: %d RPCs freed, %d held; want %d and 1", i, st.ServerRPCsFreed, st.ServerRPCs, i)
		}
		ack = wire.AckEntry{ClientID: id, ServerPort: moduleServerPort}
	}
	s.peer.drain(2 * time.Millisecond)
	var needLast int
	for _, rp := range s.peer.quiet("NEED_ACK for an acknowledged RPC", func(rp rxPacket) bool {
		return rp.Type == wire.TypeNeedAck && (rp.Common.SenderID == ids[0]|1 || rp.Common.SenderID == ids[1]|1)
	}) {
		if isNeedAck(ids[2] | 1)(rp) {
			needLast++
		}
	}
	if needLast == 0 {
		t.Errorf("no NEED_ACK for the last RPC, which nothing acknowledged")
	}
	s.ackOnce(s.ack(ids[2]), 3)
}

// TestSlowServerBusy replays capture 12, with the engine as the module's
// client: the server has the request but answers the client's RESENDs
// (offset 0, length 0xffffffff: nothing of the response has come) with
// BUSY, more often than the client's RESENDs may go unanswered; the
// client keeps waiting, takes the late response and acknowledges it. In
// the other direction, the engine as a slow server answers RESENDs for a
// response it does not have yet with BUSY.
func TestSlowServerBusy(t *testing.T) {
	t.Run("engine as client", simulated(func(t *testing.T) {
		s := newClientScene(t, homa.Config{})
		req := pattern(100, 12)
		id, done := s.call(req)
		s.expectMessage(id, req, wire.AckEntry{})
		const busies = 8 // more than a handful: each BUSY must keep the RPC alive
		for range busies {
			rs, others := s.peer.expect(wire.TypeResend)
			for _, o := range others {
				t.Errorf("between RESENDs: %s", o.String())
			}
			s.checkResendAll(rs, id)
			s.peer.send(s.bare(wire.TypeBusy, id|1))
		}
		select {
		case r := <-done:
			t.Fatalf("the RPC ended while the server was busy: %v %v", r.err, r.msg)
		default:
		}
		s.peer.send(s.packets(dataSpec{id: id | 1, msg: req, cutoffVer: linuxVersion}, 0, len(req))...)
		s.checkCall(done, req)
		s.peer.send(s.bare(wire.TypeNeedAck, id|1))
		s.expectAck(id)
	}))
	t.Run("engine as server", simulated(func(t *testing.T) {
		s := newServerScene(t, homa.Config{})
		s.echo.hold()
		const id = 2400
		req := pattern(100, 24)
		s.peer.send(s.packets(dataSpec{id: id, msg: req, cutoffVer: linuxVersion}, 0, len(req))...)
		s.waitStats("request handed to the server", func(st contract.Stats) bool { return st.RequestsReceived == 1 })
		for range 4 {
			s.peer.send(s.resend(id, 0, wire.ResendToEnd, controlPriority))
			b, others := s.peer.expect(wire.TypeBusy)
			for _, o := range others {
				t.Errorf("before BUSY: %s", o.String())
			}
			s.checkHeader(b, id|1)
		}
		s.echo.release()
		s.expectMessage(id|1, req, wire.AckEntry{})
	}))
}

// callResult is what Recv gave for a client RPC.
type callResult struct {
	msg *contract.Message
	err error
}

// call sends req from the engine to the peer's server port and waits for
// the response in the background.
func (s *scene) call(req []byte) (uint64, <-chan callResult) {
	s.t.Helper()
	id, err := s.ep.Send(netip.AddrPortFrom(peerAddr, peerServerPort), req, 0)
	if err != nil {
		s.t.Fatal(err)
	}
	done := make(chan callResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*waitFor)
		defer cancel()
		m, err := s.ep.Recv(ctx, id)
		done <- callResult{m, err}
	}()
	return id, done
}

// result waits for the outcome of a call.
func (s *scene) result(done <-chan callResult) callResult {
	s.t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(4 * waitFor):
		s.t.Fatal("Recv did not return")
		return callResult{}
	}
}

// checkCall checks that a call returned the response want.
func (s *scene) checkCall(done <-chan callResult, want []byte) {
	s.t.Helper()
	r := s.result(done)
	if r.err != nil || r.msg.Err != nil || !bytes.Equal(r.msg.Data, want) {
		s.t.Fatalf("call: %v %+v", r.err, r.msg)
	}
	r.msg.Release()
}

// checkResendAll checks a client's RESEND for a response of which nothing
// has come: offset 0, length 0xffffffff, priority 7.
func (s *scene) checkResendAll(rs rxPacket, id uint64) {
	s.t.Helper()
	s.checkHeader(rs, id)
	if r := rs.Resend; r.Offset != 0 || r.Length != wire.ResendToEnd || r.Priority != controlPriority {
		s.t.Errorf("RESEND: %s; want offset 0 length -1 priority 7", rs.String())
	}
}

// expectAck waits for an ACK from the engine acknowledging exactly the
// client RPC id (num_acks=1), as the module's ACK in the captures.
func (s *scene) expectAck(id uint64) {
	s.t.Helper()
	a, _ := s.peer.expect(wire.TypeAck)
	s.checkHeader(a, id)
	if e := a.Ack.Entries(); len(e) != 1 || e[0] != (wire.AckEntry{ClientID: id, ServerPort: peerServerPort}) {
		s.t.Errorf("ACK: %s; want num_acks=1 acks=[(%d, %d)]", a.String(), id, peerServerPort)
	}
}

// TestClientResendEverything replays capture 11: a server that takes the
// request and never answers. The client asks for the whole response
// with RESEND(offset 0, length 0xffffffff, priority 7), again and again,
// and finally fails the call. The module gives up after 19 RESENDs; the
// engine after Config.Resend.TimeoutResends (20 by default).
func TestClientResendEverything(t *testing.T) { synctest.Test(t, clientResendEverything) }

func clientResendEverything(t *testing.T) {
	s := newClientScene(t, homa.Config{})
	req := pattern(100, 11)
	id, done := s.call(req)
	s.expectMessage(id, req, wire.AckEntry{})
	resends := 0
	deadline := time.Now().Add(3 * waitFor)
	for time.Now().Before(deadline) {
		select {
		case r := <-done:
			if r.err != nil || r.msg == nil || !errors.Is(r.msg.Err, contract.ErrPeerTimeout) {
				t.Fatalf("the call ended with %v %+v; want ErrPeerTimeout", r.err, r.msg)
			}
			if resends < 2 || uint64(resends) != s.ep.Stats().ResendsSent {
				t.Errorf("%d RESENDs received, %d sent; want the same, at least 2", resends, s.ep.Stats().ResendsSent)
			}
			return
		default:
		}
		if rp, ok := s.peer.next(10 * time.Millisecond); ok {
			if rp.Type != wire.TypeResend {
				t.Errorf("unexpected: %s", rp.String())
				continue
			}
			s.checkResendAll(rp, id)
			resends++
		}
	}
	t.Fatalf("the call did not fail; %d RESENDs", resends)
}

// TestWithheldResponsePacket replays capture 13, with the engine as the
// module's client: the second packet of a 5000-byte response is
// withheld. A NEED_ACK that comes meanwhile gets no ACK (the response is
// incomplete); the client asks for exactly the missing range with a
// RESEND at priority 7, and after the retransmission the call completes
// and a NEED_ACK gets an ACK with num_acks=1.
func TestWithheldResponsePacket(t *testing.T) { synctest.Test(t, withheldResponsePacket) }

func withheldResponsePacket(t *testing.T) {
	s := newClientScene(t, homa.Config{})
	req := pattern(5000, 13)
	id, done := s.call(req)
	s.expectMessage(id, req, wire.AckEntry{})
	spec := dataSpec{id: id | 1, msg: req, cutoffVer: linuxVersion}
	pkts := s.packets(spec, 0, len(req))
	s.peer.send(pkts[0], pkts[2], pkts[3])
	s.peer.send(s.bare(wire.TypeNeedAck, id|1))
	for {
		rs, others := s.peer.expect(wire.TypeResend)
		for _, o := range others {
			t.Errorf("while the response is incomplete: %s", o.String())
		}
		s.checkHeader(rs, id)
		if r := rs.Resend; r.Offset == 0 && r.Length == wire.ResendToEnd {
			continue // sent before the first response packet arrived
		}
		if r := rs.Resend; r.Offset != segment || r.Length != segment || r.Priority != controlPriority {
			t.Errorf("RESEND for the withheld packet: %s; want offset 1424 length 1424 priority 7", rs.String())
		}
		break
	}
	spec.retransmit = true
	s.peer.send(s.packets(spec, segment, 2*segment)...)
	s.checkCall(done, req)
	s.peer.send(s.bare(wire.TypeNeedAck, id|1))
	s.expectAck(id)
}

// TestClientPiggybacksAcks replays capture 09: the module as client sends
// three requests in turn, each acknowledging the previous RPC in its DATA
// header (ack=(id, 600)); it sends no ACK packet. The engine also
// flushes pending acknowledgments in an ACK packet one tick after an RPC
// completes when no request has carried them by then; the ticker is
// slowed down here so that the next request always leaves first.
func TestClientPiggybacksAcks(t *testing.T) { synctest.Test(t, clientPiggybacksAcks) }

func clientPiggybacksAcks(t *testing.T) {
	s := newClientScene(t, homa.Config{Config: core.Config{Tick: time.Hour}})
	var ack wire.AckEntry
	for i := range 3 {
		req := pattern(100, byte(9+i))
		id, done := s.call(req)
		if id&1 != 0 {
			t.Fatalf("client id %d is odd", id)
		}
		s.expectMessage(id, req, ack)
		s.peer.send(s.packets(dataSpec{id: id | 1, msg: req, cutoffVer: linuxVersion}, 0, len(req))...)
		s.checkCall(done, req)
		ack = wire.AckEntry{ClientID: id, ServerPort: peerServerPort}
	}
	s.peer.quiet("packet after the last response", func(rxPacket) bool { return true })
}

// TestGrants200KB replays capture 02, with the engine as the module's
// echo server: 200,000 bytes each way. Each side sends the first 40,000
// bytes unscheduled (incoming=40000) and the rest as the receiver grants
// it. The engine must grant the request up to its end, in offsets that
// never go back, at a scheduled priority (0..3 under Linux's cutoffs; the
// module uses 0), and must send no response byte beyond what the peer
// granted. The engine grants a larger window than the module's ~10,000
// bytes; the offsets are not compared. Then NEED_ACK and ACK.
func TestGrants200KB(t *testing.T) { synctest.Test(t, grants200KB) }

func grants200KB(t *testing.T) {
	s := newServerScene(t, homa.Config{})
	const id, n = 2000, 200_000
	req := pattern(n, 2)
	spec := dataSpec{id: id, msg: req, cutoffVer: linuxVersion}
	s.peer.send(s.packets(spec, 0, unsched)...)
	ex := exchange{s: s, id: id | 1, n: n}
	ex.sent, ex.granted, ex.respGranted = unsched, unsched, unsched
	for !ex.resp.complete() {
		rp, ok := s.peer.next(waitFor)
		if !ok {
			t.Fatalf("stalled: request %d sent, %d granted; response %d received, %d granted\n%s",
				ex.sent, ex.granted, ex.resp.received, ex.respGranted, s.peer.history())
		}
		switch rp.Type {
		case wire.TypeGrant:
			if from, to := ex.grant(rp); from < to {
				s.peer.send(s.packets(spec, from, to)...)
			}
		case wire.TypeResend:
			// Only when the test machine stalls the peer for 5 ticks.
			s.checkHeader(rp, id|1)
			r := rp.Resend
			if end := uint64(r.Offset) + uint64(r.Length); end > uint64(ex.sent) {
				t.Errorf("RESEND for bytes never sent: %s", rp.String())
			}
			spec.retransmit = true
			s.peer.send(s.packets(spec, int(r.Offset), int(min(uint64(r.Offset)+uint64(r.Length), uint64(ex.sent))))...)
			spec.retransmit = false
		case wire.TypeData:
			if g := ex.data(rp); g > 0 {
				s.peer.send(s.grant(id, g, 0))
			}
		default:
			t.Errorf("unexpected: %s", rp.String())
		}
	}
	if ex.sent != n || ex.granted != n {
		t.Errorf("request: %d bytes granted, %d sent; want all %d", ex.granted, ex.sent, n)
	}
	if !bytes.Equal(ex.resp.buf, req) {
		t.Error("the response is not the request")
	}
	t.Logf("the engine sent %d GRANTs for the request", ex.grants)
	na, _ := s.peer.expect(wire.TypeNeedAck)
	s.checkHeader(na, id|1)
	s.ackOnce(s.ack(id), 1)
}

// exchange tracks a 200 KB message each way between the peer and the
// engine: the peer's message, granted by the engine, and the engine's,
// granted by the peer.
type exchange struct {
	s           *scene
	id          uint64 // the engine's id
	n           int    // length of each message
	sent        int    // bytes of the peer's message sent
	granted     int    // the engine's grant for it
	grants      int    // GRANTs from the engine
	resp        message
	respGranted int // the peer's grant for the engine's message
}

// grant checks a GRANT from the engine and returns the range of the
// peer's message it lets the peer send.
func (ex *exchange) grant(rp rxPacket) (from, to int) {
	t := ex.s.t
	ex.s.checkHeader(rp, ex.id)
	g := rp.Grant
	ex.grants++
	if int(g.Offset) < ex.granted || int(g.Offset) > ex.n || g.Priority > 3 {
		t.Errorf("GRANT after one to %d, for a %d-byte message: %s", ex.granted, ex.n, rp.String())
	}
	ex.granted = max(ex.granted, min(int(g.Offset), ex.n))
	from, to = ex.sent, ex.granted
	ex.sent = max(ex.sent, ex.granted)
	return from, to
}

// data checks a DATA packet of the engine's message, never beyond the
// peer's grant, and returns the peer's next grant (0: none yet). The
// peer grants the way the raw peer of capture 02 did: as each packet
// arrives, 40,000 bytes beyond what it has received.
func (ex *exchange) data(rp rxPacket) uint32 {
	t := ex.s.t
	ex.s.checkHeader(rp, ex.id)
	d := &rp.Data
	if d.MessageLength != uint32(ex.n) || d.Incoming != unsched || d.Retransmit != 0 {
		t.Errorf("DATA of the %d-byte message: %s", ex.n, rp.String())
	}
	if end := int(d.Offset()) + len(d.Payload); end > ex.respGranted {
		t.Errorf("DATA up to %d, beyond the granted %d: %s", end, ex.respGranted, rp.String())
	}
	if err := ex.resp.add(d); err != nil {
		t.Fatal(err)
	}
	if g := min(ex.resp.received+unsched, ex.n); g > ex.respGranted {
		ex.respGranted = g
		return uint32(g)
	}
	return 0
}

// TestUnscheduledOnly replays capture 03: the client sends the 40,000
// unscheduled bytes of a 200,000-byte request and ignores the GRANT. The
// server asks for the granted bytes with RESENDs (offset 40000, up to the
// grant, priority 7) until it declares the client dead and forgets the
// RPC without a word. The module's grant is 50,000 and it gives up after
// 19 RESENDs; the engine grants more at once and gives up after
// Config.Resend.TimeoutResends (20).
func TestUnscheduledOnly(t *testing.T) { synctest.Test(t, unscheduledOnly) }

func unscheduledOnly(t *testing.T) {
	s := newServerScene(t, homa.Config{})
	const id, n = 3000, 200_000
	s.peer.send(s.packets(dataSpec{id: id, msg: pattern(n, 3), cutoffVer: linuxVersion}, 0, unsched)...)
	g, others := s.peer.expect(wire.TypeGrant)
	for _, o := range others {
		t.Errorf("before the GRANT: %s", o.String())
	}
	s.checkHeader(g, id|1)
	granted := g.Grant.Offset
	if granted <= unsched || granted > n || g.Grant.Priority > 3 {
		t.Errorf("GRANT: %s", g.String())
	}
	resends := 0
	deadline := time.Now().Add(waitFor)
	for s.ep.Stats().ServerRPCs > 0 {
		rp, ok := s.peer.next(10 * time.Millisecond)
		if !ok {
			if time.Now().After(deadline) {
				t.Fatalf("after %d RESENDs the RPC is still held", resends)
			}
			continue
		}
		switch rp.Type {
		case wire.TypeGrant: // a later decision may raise the grant
			s.checkHeader(rp, id|1)
			granted = max(granted, rp.Grant.Offset)
		case wire.TypeResend:
			s.checkHeader(rp, id|1)
			if r := rp.Resend; r.Offset != unsched || r.Offset+r.Length != granted || r.Priority != controlPriority {
				t.Errorf("RESEND: %s; want offset 40000 length %d priority 7", rp.String(), granted-unsched)
			}
			resends++
		default:
			t.Errorf("unexpected: %s", rp.String())
		}
	}
	if resends < 2 {
		t.Errorf("%d RESENDs before giving up, want several", resends)
	}
	s.peer.drain(2 * time.Millisecond)
	s.peer.quiet("packet after giving up", func(rxPacket) bool { return true })
	if st := s.ep.Stats(); st.PeerTimeouts != 1 || st.RequestsReceived != 0 {
		t.Errorf("peer timeouts %d, requests served %d; want 1 and 0", st.PeerTimeouts, st.RequestsReceived)
	}
}

// TestClientNeedAck200KB replays capture 10, with the engine as the
// module's client: 200,000 bytes each way with GRANTs both ways, then the
// server's NEED_ACK gets an ACK with num_acks=1 naming the RPC. The
// engine on its own flushes pending acknowledgments in an ACK one tick
// after the response; the ticker is slowed down here so that the ACK the
// test sees can only be the answer to the NEED_ACK.
func TestClientNeedAck200KB(t *testing.T) { synctest.Test(t, clientNeedAck200KB) }

func clientNeedAck200KB(t *testing.T) {
	s := newClientScene(t, homa.Config{Config: core.Config{Tick: time.Hour}})
	const n = 200_000
	req := pattern(n, 10)
	id, done := s.call(req)
	// The request: 40,000 bytes unscheduled, the rest as the peer grants.
	ex := exchange{s: s, id: id, n: n, respGranted: unsched}
	for !ex.resp.complete() {
		rp, _ := s.peer.expect(wire.TypeData)
		if g := ex.data(rp); g > 0 {
			s.peer.send(s.grant(id|1, g, 0))
		}
	}
	if !bytes.Equal(ex.resp.buf, req) {
		t.Fatal("the request arrived with other bytes")
	}
	// The response: 40,000 bytes unscheduled, the rest as the engine
	// grants.
	spec := dataSpec{id: id | 1, msg: req, cutoffVer: linuxVersion}
	s.peer.send(s.packets(spec, 0, unsched)...)
	ex.sent, ex.granted = unsched, unsched
	for ex.sent < n {
		g, others := s.peer.expect(wire.TypeGrant)
		for _, o := range others {
			t.Errorf("while receiving the response: %s", o.String())
		}
		if from, to := ex.grant(g); from < to {
			s.peer.send(s.packets(spec, from, to)...)
		}
	}
	s.checkCall(done, req)
	s.peer.send(s.bare(wire.TypeNeedAck, id|1))
	s.expectAck(id)
}
