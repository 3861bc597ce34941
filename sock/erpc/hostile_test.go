package erpc

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/internal/testkit/socktest"
	"github.com/homa-go/homa/sock"
)

// testConfig is the socket configuration of this file's sockets: no busy
// polling inside a synctest bubble.
func testConfig() *sock.Config {
	return &sock.Config{PollDuration: -1}
}

// rawPeer speaks the erpc wire format by hand over a bare socket.
type rawPeer struct {
	t *testing.T
	s *sock.Socket
}

// call sends msg to dst and returns the reply's header, its bytes, or
// fails the test.
func (p rawPeer) call(dst netip.AddrPort, msg []byte) (header, []byte) {
	p.t.Helper()
	m, err := p.s.Call(context.Background(), dst, msg)
	if err != nil {
		p.t.Fatalf("call: %v", err)
	}
	var h header
	if _, err := h.Parse(m.Data); err != nil {
		p.t.Fatalf("reply does not parse: %v (%x)", err, m.Data)
	}
	return h, m.Data
}

// TestHostilePeer: a peer that sends what it likes gets a reply to every
// message, never runs a handler it has no right to, and cannot make an
// exactly-once request run twice: not with a second attempt, not below
// its ack floor, not under another client id, session or address.
func TestHostilePeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 40})
		defer nw.Close()
		host := netip.MustParseAddr("10.1.0.1")
		cfg := &Config{Open: func(a netip.AddrPort) (*sock.Socket, error) {
			c, err := socktest.OpenMem(nw, a, testConfig())
			if err != nil {
				return nil, err
			}
			return c, nil
		}}
		nx, err := NewNexus(netip.AddrPortFrom(host, 2000), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer nx.Close()
		var mu sync.Mutex
		runs := map[string]int{}
		_ = nx.Register(1, func(h *ReqHandle) {
			mu.Lock()
			runs[string(h.Request())]++
			mu.Unlock()
			answerOK(h)
		}, Dispatch)
		r, stop := serveRpc(t, nx)
		defer stop()

		open := func(a string) rawPeer {
			c, err := socktest.OpenMem(nw, netip.AddrPortFrom(netip.MustParseAddr(a), 0), testConfig())
			if err != nil {
				t.Fatal(err)
			}
			s := c
			t.Cleanup(func() { s.Close() })
			return rawPeer{t, s}
		}
		p, other := open("10.1.0.2"), open("10.1.0.3")

		// Garbage to the Nexus and to the Rpc: a bad-request reply each.
		for _, junk := range [][]byte{{0}, []byte("GET / HTTP/1.1"), make([]byte, 100), {hdrMagic, hdrVersion, 99}} {
			for _, dst := range []netip.AddrPort{nx.Addr(), r.LocalAddr()} {
				if h, _ := p.call(dst, junk); h.status != statusBadRequest {
					t.Fatalf("junk %x to %v: status %d", junk, dst, h.status)
				}
			}
		}
		// A request kind to the Nexus, a connect to the Rpc: refused.
		if h, _ := p.call(nx.Addr(), (&header{kind: kindRequest, reqType: 1}).Append(nil)); h.status != statusBadRequest {
			t.Fatalf("request to the Nexus: status %d", h.status)
		}
		connect := (&connectBody{dstRpc: 0, srcRpc: 9, fresh: true, clientID: 77}).Append((&header{kind: kindConnect}).Append(nil))
		if h, _ := p.call(r.LocalAddr(), connect); h.status != statusBadRequest {
			t.Fatalf("connect to the Rpc: status %d", h.status)
		}
		// A connect to a missing Rpc, then a good one.
		missing := (&connectBody{dstRpc: 5, fresh: true, clientID: 77}).Append((&header{kind: kindConnect}).Append(nil))
		if h, _ := p.call(nx.Addr(), missing); h.status != statusNoSuchRpc {
			t.Fatalf("connect to Rpc 5: status %d", h.status)
		}
		h, b := p.call(nx.Addr(), connect)
		var body connectReplyBody
		if _, err := body.Parse(b); h.kind != kindConnectReply || h.status != statusOK || err != nil {
			t.Fatalf("connect: %+v %v", h, err)
		}
		rpcAddr := netip.AddrPortFrom(host, body.port)
		sess, tok := h.session, h.token

		req := func(seq, floor uint64, retry uint16, clientID uint64, data string) []byte {
			hd := header{kind: kindRequest, reqType: 1, session: sess, token: tok}
			if seq != 0 {
				hd.flags, hd.clientID, hd.seq, hd.ackFloor, hd.retry = flagExactlyOnce, clientID, seq, floor, retry
			}
			return append(hd.Append(nil), data...)
		}
		expect := func(who rawPeer, msg []byte, want status) {
			t.Helper()
			if h, _ := who.call(rpcAddr, msg); h.kind != kindResponse || h.status != want {
				t.Fatalf("reply %+v, want status %d", h, want)
			}
		}
		expect(p, req(0, 0, 0, 0, "plain"), statusOK)
		expect(p, req(5, 1, 0, 77, "five"), statusOK)
		expect(p, req(5, 1, 1, 77, "five"), statusOK)             // a second attempt: from the record
		expect(p, req(6, 6, 0, 77, "six"), statusOK)              // acknowledges 5
		expect(p, req(5, 1, 2, 77, "five"), statusStale)          // below the floor now
		expect(p, req(7, 6, 0, 78, "seven"), statusBadRequest)    // not the session's client id
		expect(other, req(7, 6, 0, 77, "seven"), statusNoSession) // not the session's client
		expect(p, req(0, 0, 0, 0, "")[:baseHeaderLen], statusOK)  // an empty request is fine
		bad := req(0, 0, 0, 0, "x")
		bad[offToken] ^= 1
		expect(p, bad, statusNoSession) // a forged token
		unknown := req(0, 0, 0, 0, "x")
		unknown[offReqType] = 200
		expect(p, unknown, statusNoSuchType)

		mu.Lock()
		defer mu.Unlock()
		for k, n := range map[string]int{"plain": 1, "five": 1, "six": 1, "seven": 0, "": 1, "x": 0} {
			if runs[k] != n {
				t.Errorf("handler ran %d times for %q, want %d", runs[k], k, n)
			}
		}
		if st := r.Stats(); st.StaleDups != 1 || st.Duplicates != 1 || st.BadMessages == 0 {
			t.Errorf("stats %+v", st)
		}

		// A disconnect from the wrong address is refused; from the
		// client it ends the session; the client's records stay with
		// its lease.
		disc := (&disconnectBody{dstRpc: 0}).Append((&header{kind: kindDisconnect, session: sess, token: tok}).Append(nil))
		if h, _ := other.call(nx.Addr(), disc); h.status != statusNoSession {
			t.Fatalf("disconnect from a stranger: status %d", h.status)
		}
		if h, _ := p.call(nx.Addr(), disc); h.kind != kindDisconnectReply || h.status != statusOK {
			t.Fatalf("disconnect: %+v", h)
		}
		if st := r.Stats(); st.ServerSessions != 0 || st.Records != 1 {
			t.Fatalf("after disconnect: %d sessions, %d records, want 0 and 1", st.ServerSessions, st.Records)
		}
		if st := nx.Stats(); st.Connects != 1 || st.Disconnects != 1 || st.Refused != 1 || st.BadMessages != 5 {
			t.Fatalf("Nexus stats %+v, want 1 connect, 1 disconnect, 1 refused, 5 bad", st)
		}
		expect(p, req(8, 6, 0, 77, "eight"), statusNoSession)

		// Another host can neither connect under the client's id nor
		// renew its lease.
		if h, _ := other.call(nx.Addr(), connect); h.status != statusBadRequest {
			t.Fatalf("connect under another host's id: status %d", h.status)
		}
		steal := (&heartbeatBody{ids: []uint64{77}}).Append((&header{kind: kindHeartbeat}).Append(nil))
		var sr heartbeatReplyBody
		if _, b := other.call(nx.Addr(), steal); func() bool { _, err := sr.Parse(b); return err != nil }() || !sr.unknown[0] {
			t.Fatalf("heartbeat for another host's lease: %+v", sr)
		}

		// Silent for longer than the lease (4 s, forgotten by 5 s): the
		// records go, and the client id can no longer connect, fresh or
		// not; a new one can.
		time.Sleep(5100 * time.Millisecond)
		if st := r.Stats(); st.Records != 0 {
			t.Fatalf("after the lease: %d records", st.Records)
		}
		if st := nx.Stats(); st.Leases != 0 || st.LeasesExpired != 1 {
			t.Fatalf("after the lease: Nexus stats %+v", st)
		}
		again := (&connectBody{dstRpc: 0, srcRpc: 9, clientID: 77}).Append((&header{kind: kindConnect}).Append(nil))
		if h, _ := p.call(nx.Addr(), again); h.status != statusLeaseExpired {
			t.Fatalf("connect under the expired id: status %d", h.status)
		}
		// A heartbeat names it unknown.
		hb := (&heartbeatBody{ids: []uint64{77}}).Append((&header{kind: kindHeartbeat}).Append(nil))
		var hr heartbeatReplyBody
		if h, b := p.call(nx.Addr(), hb); h.kind != kindHeartbeatReply || h.status != statusOK {
			t.Fatalf("heartbeat: %+v", h)
		} else if _, err := hr.Parse(b); err != nil || len(hr.unknown) != 1 || !hr.unknown[0] {
			t.Fatalf("heartbeat reply %+v %v", hr, err)
		}
	})
}

// answerOK answers the request of h with "ok".
func answerOK(h *ReqHandle) {
	resp := h.PreResp()
	_ = h.Rpc().ResizeMsgBuffer(resp, 2)
	copy(resp.Data(), "ok")
	_ = h.Rpc().EnqueueResponse(h, resp)
}

// serveRpc returns an Rpc of nx serving requests until stop, which waits
// for it and closes it.
func serveRpc(t testing.TB, nx *Nexus) (r *Rpc, stop func()) {
	t.Helper()
	r, err := nx.NewRpc(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = r.Serve(ctx) })
	return r, func() { cancel(); wg.Wait(); r.Close() }
}
