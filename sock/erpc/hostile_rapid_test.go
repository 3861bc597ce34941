package erpc

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"

	"github.com/homa-go/homa/sock"
)

// hostileMsg is a message a hostile client sends: to the server's Nexus
// or to its Rpc.
type hostileMsg struct {
	toNexus bool
	data    []byte
	then    []byte // sent after data's reply, if any: a large request's second fragment
	wait    bool   // await the reply (for a while)
	peer    int    // the socket to send it from, if the session's (else -1)
}

// sessionRef is a session the hostile client was given (under client
// id client), or made up.
type sessionRef struct {
	num, token uint32
	client     uint64
	peer       int // the index of the socket it was given to
}

// drawHostile makes, from pk's choices, a message of any kind the
// protocol has, with fields from small ranges so that they meet:
// connects (fresh or not, to Rpc 0 or a missing one) and disconnects,
// requests (plain or exactly-once, with any sequence, floor,
// acknowledgment and attempt; for a handler or none, with a response of
// one fragment or two), fragments of large requests (in order or not,
// whole or short, of various totals, or both of a request in turn),
// pulls, acknowledgments and heartbeats; the session is one the server
// gave (sessions[i]) or made up.
func drawHostile(pk *picker, sessions []sessionRef, chunk []byte) (m hostileMsg) {
	id := uint64(pk.intRange(1, 3))
	ses := sessionRef{uint32(pk.intRange(0, 3)), uint32(pk.intRange(0, 3)), id, -1}
	if len(sessions) > 0 && pk.intRange(0, 3) > 0 {
		ses = sampled(pk, sessions)
		if pk.intRange(0, 3) > 0 {
			id = ses.client
		}
	}
	// Mostly from the socket the session was given to.
	defer func() {
		m.peer = -1
		if ses.peer >= 0 && pk.intRange(0, 3) > 0 {
			m.peer = ses.peer
		}
	}()
	eo := func(h *header) {
		h.flags |= flagExactlyOnce
		h.clientID, h.seq = id, uint64(pk.intRange(1, 6))
		h.ackFloor = uint64(pk.intRange(0, 6))
		h.retry = uint16(pk.intRange(0, 2))
		if pk.bool() {
			h.flags |= flagAck
			h.ackSeq, h.ackRetries = uint64(pk.intRange(0, 6)), uint16(pk.intRange(0, 2))
		}
	}
	wait := pk.bool()
	switch pk.intRange(0, 7) {
	case 0:
		c := connectBody{dstRpc: uint8(pk.intRange(0, 1)), srcRpc: 1, fresh: pk.bool(), clientID: id}
		return hostileMsg{toNexus: true, data: c.Append((&header{kind: kindConnect}).Append(nil)), wait: true}
	case 1:
		h := header{kind: kindDisconnect, session: ses.num, token: ses.token}
		return hostileMsg{toNexus: true, data: (&disconnectBody{dstRpc: 0}).Append(h.Append(nil)), wait: wait}
	case 2:
		h := header{kind: kindHeartbeat}
		return hostileMsg{toNexus: true, data: (&heartbeatBody{ids: []uint64{id, id + 1}}).Append(h.Append(nil)), wait: wait}
	case 3, 4:
		h := header{kind: kindRequest, reqType: uint8(pk.intRange(1, 3)), session: ses.num, token: ses.token}
		if pk.bool() {
			eo(&h)
		}
		return hostileMsg{data: append(h.Append(nil), make([]byte, pk.intRange(0, 16))...), wait: wait}
	case 5:
		h := header{kind: kindRequest, reqType: 1, flags: flagFragment, session: ses.num, token: ses.token,
			msgID: uint32(pk.intRange(1, 2)), fragOff: uint32(pk.intRange(0, 2)) * fragChunk,
			total: sampled(pk, []uint32{fragChunk + 100, 3 * fragChunk, 8 << 20})}
		if pk.bool() {
			eo(&h)
		}
		if pk.bool() { // both fragments of a request, in order
			h.total, h.fragOff = fragChunk+100, 0
			first := append(h.Append(nil), chunk...)
			h.fragOff = fragChunk
			return hostileMsg{data: first, then: append(h.Append(nil), chunk[:100]...), wait: true}
		}
		n := min(int(h.total-min(h.fragOff, h.total)), fragChunk)
		if pk.intRange(0, 3) == 0 {
			n = pk.intRange(0, n)
		}
		return hostileMsg{data: append(h.Append(nil), chunk[:n]...), wait: wait}
	case 6:
		h := header{kind: kindPull, flags: flagFragment, session: ses.num, token: ses.token,
			msgID: uint32(pk.intRange(0, 2)), fragOff: uint32(pk.intRange(0, 2)) * fragChunk}
		if pk.bool() {
			eo(&h)
		}
		return hostileMsg{data: h.Append(nil), wait: wait}
	}
	h := header{kind: kindAck, session: ses.num, token: ses.token}
	eo(&h)
	h.seq = 0 // an acknowledgment alone names no request of its own
	return hostileMsg{data: h.Append(nil), wait: wait}
}

// TestRapidHostileClients: clients on two hosts that send a server any
// sequence of messages the protocol has (drawHostile), awaiting some
// replies and abandoning others, while time passes, never crash it and
// never leave it unable to serve: afterwards a third host connects and
// has its exactly-once request run, and once every lease has expired
// the server holds nothing: no session, lease, record, record byte or
// large message, and no host's share of any.
func TestRapidHostileClients(t *testing.T) {
	chunk := make([]byte, fragChunk)
	rapid.Check(t, func(rt *rapid.T) {
		var failure string
		steps := rapid.IntRange(1, 30).Draw(rt, "steps")
		// Messages name the sessions the server gave, known only as the
		// run goes: it takes its choices from numbers drawn before it
		// (rapid's draws belong to its own goroutine).
		pk := &picker{vals: rapid.SliceOfN(rapid.Uint32(), steps*40, steps*40).Draw(rt, "choices")}
		synctest.Test(t, func(t *testing.T) {
			failure = hostileClientsRun(t, pk, steps, chunk)
		})
		if failure != "" {
			rt.Fatal(failure)
		}
	})
}

// hostileClientsRun runs one sequence of steps drawn from rt against a
// fresh server and returns what failed.
func hostileClientsRun(t *testing.T, pk *picker, steps int, chunk []byte) string {
	w := newShareWorld(t, Config{MaxServerSessions: 10, MaxLeases: 10, LargeMessageBytes: 12 * fragChunk,
		ExactlyOnce: ExactlyOnceConfig{MaxRecords: 20}}, func(nx *Nexus) {
		_ = nx.Register(1, answerOK, Dispatch)
		_ = nx.Register(2, func(h *ReqHandle) { // a response of two fragments
			resp, _ := h.Rpc().AllocMsgBuffer(fragChunk + 100)
			_ = h.Rpc().EnqueueResponse(h, resp)
			h.Rpc().FreeMsgBuffer(resp)
		}, Dispatch)
	})
	nx, r := w.nx, w.r
	peers := []*sock.Socket{w.peer(hostA).s, w.peer(hostB).s}
	var sessions []sessionRef
	for range steps {
		m := drawHostile(pk, sessions, chunk)
		pi := m.peer
		if pi < 0 {
			pi = pk.intRange(0, len(peers)-1)
		}
		p := peers[pi]
		dst := r.LocalAddr()
		if m.toNexus {
			dst = nx.Addr()
		}
		id, err := p.Send(dst, m.data, 0)
		if err != nil {
			return fmt.Sprintf("send: %v", err)
		}
		if m.wait {
			h, err := awaitReply(p, id)
			if err != nil {
				return fmt.Sprintf("a message of kind %d: %v", m.data[offKind], err)
			}
			if h.kind == kindConnectReply && h.status == statusOK {
				var c connectBody
				_, _ = c.Parse(m.data)
				sessions = append(sessions, sessionRef{h.session, h.token, c.clientID, pi})
			}
			if m.then != nil && h.status == statusOK {
				if id, err = p.Send(dst, m.then, 0); err != nil {
					return fmt.Sprintf("send: %v", err)
				}
				if _, err := awaitReply(p, id); err != nil {
					return fmt.Sprintf("a large request's last fragment: %v", err)
				}
			}
		} else if pk.bool() {
			_ = p.Abort(id)
		}
		time.Sleep(time.Duration(pk.intRange(0, 300)) * time.Millisecond)
	}
	for _, p := range peers {
		p.Close()
	}

	// A third host is served.
	good := w.peer(hostC)
	h, b := good.call(nx.Addr(), (&connectBody{dstRpc: 0, srcRpc: 1, fresh: true, clientID: 77}).Append((&header{kind: kindConnect}).Append(nil)))
	var body connectReplyBody
	if _, err := body.Parse(b); h.status != statusOK || err != nil {
		return fmt.Sprintf("another host's connect: status %d, %v", h.status, err)
	}
	req := header{kind: kindRequest, reqType: 1, flags: flagExactlyOnce, session: h.session, token: h.token, clientID: 77, seq: 1}
	if rh, _ := good.call(netip.AddrPortFrom(nx.Addr().Addr(), body.port), append(req.Append(nil), "hi"...)); rh.status != statusOK {
		return fmt.Sprintf("another host's exactly-once request: status %d", rh.status)
	}
	good.s.Close()

	// Every lease expires, and everything with it.
	time.Sleep(2 * defaultLeaseTimeout)
	synctest.Wait()
	st := r.Stats()
	r.srvMu.Lock()
	sessHosts := len(r.srvHosts)
	r.srvMu.Unlock()
	r.eo.mu.Lock()
	eoHosts, eoClients := len(r.eo.hosts), len(r.eo.clients)
	r.eo.mu.Unlock()
	r.large.mu.Lock()
	largeHosts, largeMsgs := len(r.large.hosts), len(r.large.msgs)
	r.large.mu.Unlock()
	if st.ServerSessions != 0 || st.Records != 0 || st.RecordBytes != 0 || st.RecordsReserved != 0 || st.LargeBytes != 0 ||
		nx.Stats().Leases != 0 || nx.leases.hosts() != 0 || sessHosts+eoHosts+eoClients+largeHosts+largeMsgs != 0 {
		return fmt.Sprintf("after every lease expired: %+v, %d leases (%d hosts); hosts' shares: sessions %d, records %d (%d clients), large %d (%d messages)",
			st, nx.Stats().Leases, nx.leases.hosts(), sessHosts, eoHosts, eoClients, largeHosts, largeMsgs)
	}
	return ""
}

// awaitReply waits a second for the reply to the request id of p and
// returns its header.
func awaitReply(p *sock.Socket, id uint64) (header, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	reply, err := p.Recv(ctx, id)
	if err != nil {
		return header{}, fmt.Errorf("no reply: %w", err)
	}
	defer reply.Release()
	var h header
	if _, err := h.Parse(reply.Data); err != nil {
		return h, fmt.Errorf("a reply that does not parse: %w", err)
	}
	return h, nil
}

// picker makes choices from numbers drawn beforehand.
type picker struct {
	vals []uint32
	i    int
}

// intRange is a number in [lo, hi].
func (p *picker) intRange(lo, hi int) int {
	v := uint32(0)
	if p.i < len(p.vals) {
		v = p.vals[p.i]
		p.i++
	}
	return lo + int(v%uint32(hi-lo+1))
}

func (p *picker) bool() bool { return p.intRange(0, 1) == 1 }

// sampled is one of xs.
func sampled[T any](p *picker, xs []T) T { return xs[p.intRange(0, len(xs)-1)] }
