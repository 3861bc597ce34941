package erpc

import (
	"bytes"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/internal/testkit/socktest"
	"github.com/homa-go/homa/sock"
)

// TestLargeHostile: a peer that sends fragments as it likes costs the
// server only the bytes that arrived and fit its limits. A claim of 8 MiB
// holds one fragment; a claim above MaxMessage holds nothing; fragments
// may come in any order within MaxFragmentWindow of the first missing,
// but one beyond it, repeated, overlapping, short or inconsistent drops
// its message, and every refusal is counted; a message left unfinished
// goes after MessageTimeout; a pull of nothing is refused. The handler
// never runs.
func TestLargeHostile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hp := newHostileLarge(t, 72)
		defer hp.close()
		const eight = 8 << 20
		const huge = 20 * fragChunk // more fragments than the window
		chunk := hp.chunk
		frag := hp.frag
		expect := hp.expect
		expect("first fragment of a claimed 8 MiB", frag(1, 0, eight, chunk), statusOK, fragChunk, 0)
		expect("a claim of 1 GiB", frag(2, 0, 1<<30, chunk), statusTooLarge, fragChunk, 1)
		expect("out of order, within the window", frag(1, 2*fragChunk, eight, chunk), statusOK, 2*fragChunk, 0)
		expect("repeated", frag(1, 2*fragChunk, eight, chunk), statusBadRequest, 0, 1)
		expect("a fresh message", frag(9, fragChunk, eight, chunk), statusOK, fragChunk, 0)
		expect("overlap", frag(9, fragChunk/2, eight, chunk), statusBadRequest, 0, 1)
		expect("beyond the window", frag(10, MaxFragmentWindow*fragChunk, huge, chunk), statusBadRequest, 0, 1)
		expect("the window's last", frag(10, (MaxFragmentWindow-1)*fragChunk, huge, chunk), statusOK, fragChunk, 0)
		expect("another message", frag(11, 0, eight, chunk), statusOK, 2*fragChunk, 0)
		expect("again at the same offset", frag(11, 0, eight, chunk), statusBadRequest, fragChunk, 1)
		expect("the window's first", frag(10, 0, huge, chunk), statusOK, 2*fragChunk, 0)
		expect("over budget", frag(12, 0, eight, chunk), statusServerBusy, 2*fragChunk, 1)
		expect("over budget, grown", frag(10, fragChunk, huge, chunk), statusServerBusy, 0, 1)
		expect("short fragment not the last", frag(3, 0, eight, chunk[:1000]), statusBadRequest, 0, 1)
		expect("total changed", frag(4, 0, eight, chunk), statusOK, fragChunk, 0)
		expect("total changed", frag(4, fragChunk, eight-1, chunk), statusBadRequest, 0, 1)
		expect("a small message as fragments", frag(5, 0, 1000, chunk[:1000]), statusTooLarge, 0, 1)
		expect("an unfinished one", frag(6, 0, eight, chunk), statusOK, fragChunk, 0)

		// Data beyond the claimed total does not parse.
		expect("beyond the total", frag(8, 0, 10, chunk[:20]), statusBadRequest, fragChunk, 0)
		// A pull of a response that does not exist.
		pull := (&header{kind: kindPull, flags: flagFragment, session: hp.sess, token: hp.tok, msgID: 77, fragOff: fragChunk}).Append(nil)
		expect("pull of nothing", pull, statusStale, fragChunk, 0)

		// Left unfinished: gone after MessageTimeout.
		time.Sleep(2100 * time.Millisecond)
		if st := hp.r.Stats(); st.LargeBytes != 0 || st.LargeExpired != 1 || st.LargeRefused != hp.refusals {
			t.Fatalf("after MessageTimeout: %d bytes, %d expired, %d refused (want %d)", st.LargeBytes, st.LargeExpired, st.LargeRefused, hp.refusals)
		}
		if hp.runs[1] != 0 {
			t.Fatalf("handler ran %d times", hp.runs[1])
		}
	})
}

// hostileLarge is a server Rpc and a raw peer with a session to it, to
// send fragments by hand. The server's LargeMessageBytes holds two
// fragments and a little; its MaxMessage is 32 MiB; handler 1 counts its
// runs and never answers, handler 2 counts and echoes.
type hostileLarge struct {
	t         *testing.T
	nx        *Nexus
	r         *Rpc
	stop      func()
	cs        *sock.Socket
	p         rawPeer
	rpcAddr   netip.AddrPort
	sess, tok uint32
	clientID  uint64
	chunk     []byte
	runs      [3]int
	refusals  uint64
	open      func(netip.AddrPort) (*sock.Socket, error)
}

func newHostileLarge(t *testing.T, seed uint64) *hostileLarge {
	return newHostileLargeBudget(t, seed, 2*fragChunk+10)
}

// newHostileLargeBudget is newHostileLarge with budget bytes of
// LargeMessageBytes, all of which the peer's host may take.
func newHostileLargeBudget(t *testing.T, seed uint64, budget int) *hostileLarge {
	return newHostileLargeShare(t, seed, budget, budget)
}

// newHostileLargeShare is newHostileLarge with budget bytes of
// LargeMessageBytes, share of them the peer's host's.
func newHostileLargeShare(t *testing.T, seed uint64, budget, share int) *hostileLarge {
	nw := memnet.New(memnet.Config{Seed: seed})
	t.Cleanup(func() { nw.Close() })
	host := netip.MustParseAddr("10.3.0.1")
	open := func(a netip.AddrPort) (*sock.Socket, error) {
		c, err := socktest.OpenMem(nw, a, testConfig())
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	nx, err := NewNexus(netip.AddrPortFrom(host, 2000), &Config{Open: open, LargeMessageBytes: budget, LargeMessageBytesPerHost: share, MaxMessage: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	hp := &hostileLarge{t: t, nx: nx, clientID: 99, chunk: make([]byte, fragChunk)}
	_ = nx.Register(1, func(h *ReqHandle) { hp.runs[1]++ }, Dispatch)
	_ = nx.Register(2, func(h *ReqHandle) {
		hp.runs[2]++
		b, _ := h.Rpc().AllocMsgBuffer(len(h.Request()))
		copy(b.Data(), h.Request())
		_ = h.Rpc().EnqueueResponse(h, b)
		h.Rpc().FreeMsgBuffer(b)
	}, Dispatch)
	hp.r, hp.stop = serveRpc(t, nx)
	hp.open = open
	hp.connectFrom(netip.MustParseAddr("10.3.0.2"), hp.clientID)
	return hp
}

// connectFrom makes hp's peer a socket at host with a session to the
// server under client id.
func (hp *hostileLarge) connectFrom(host netip.Addr, id uint64) {
	t := hp.t
	cs, err := hp.open(netip.AddrPortFrom(host, 0))
	if err != nil {
		t.Fatal(err)
	}
	if hp.cs != nil {
		old := hp.cs
		t.Cleanup(func() { old.Close() })
	}
	hp.cs, hp.p, hp.clientID = cs, rawPeer{t, cs}, id
	connect := (&connectBody{dstRpc: 0, srcRpc: 1, fresh: true, clientID: id}).Append((&header{kind: kindConnect}).Append(nil))
	h, b := hp.p.call(hp.nx.Addr(), connect)
	var body connectReplyBody
	if _, err := body.Parse(b); h.status != statusOK || err != nil {
		t.Fatalf("connect: %+v %v", h, err)
	}
	hp.rpcAddr = netip.AddrPortFrom(hp.nx.Addr().Addr(), body.port)
	hp.sess, hp.tok = h.session, h.token
}

func (hp *hostileLarge) close() {
	hp.cs.Close()
	hp.stop()
	hp.nx.Close()
}

// frag is a fragment of request type 1, message id, at off of total.
func (hp *hostileLarge) frag(id, off, total uint32, data []byte) []byte {
	hd := header{kind: kindRequest, reqType: 1, flags: flagFragment, session: hp.sess, token: hp.tok, msgID: id, fragOff: off, total: total}
	return append(hd.Append(nil), data...)
}

// eoFrag is a fragment of an exactly-once request of type 2, sequence
// seq, attempt retry.
func (hp *hostileLarge) eoFrag(client, seq uint64, retry uint16, off, total uint32, data []byte) []byte {
	hd := header{kind: kindRequest, reqType: 2, flags: flagFragment | flagExactlyOnce, retry: retry, session: hp.sess, token: hp.tok,
		clientID: client, seq: seq, fragOff: off, total: total}
	return append(hd.Append(nil), data...)
}

// expect sends msg and checks the reply's status, the bytes the server
// then holds, and that refused more fragments were refused.
func (hp *hostileLarge) expect(what string, msg []byte, want status, held int, refused uint64) (header, []byte) {
	hp.t.Helper()
	h, b := hp.p.call(hp.rpcAddr, msg)
	if h.status != want {
		hp.t.Fatalf("%s: status %d, want %d", what, h.status, want)
	}
	hp.refusals += refused
	if st := hp.r.Stats(); st.LargeBytes != held || st.LargeRefused != hp.refusals {
		hp.t.Fatalf("%s: %d bytes held, %d refused; want %d, %d", what, st.LargeBytes, st.LargeRefused, held, hp.refusals)
	}
	return h, b
}

// TestLargeHostileExactlyOnce: fragments of an exactly-once request
// carry its identity and attempt. A fragment of an attempt older than the
// one being gathered is refused as superseded and leaves it alone; a
// newer attempt takes over what is held, and a resume query says where
// it is; a fragment held already is acknowledged again and not kept; a
// fragment of a request that ran, even not its first, gets the recorded
// response and runs nothing; a fragment under another client's id is
// refused. The pulls of the recorded response come from the record. A
// resumed attempt's fragment that finds nothing held beyond the window
// is refused retryably and holds nothing.
func TestLargeHostileExactlyOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hp := newHostileLarge(t, 73)
		defer hp.close()
		const total = fragChunk + 100
		data := make([]byte, total)
		for i := range data {
			data[i] = byte(i % 253)
		}
		first, last := data[:fragChunk], data[fragChunk:]
		f := func(retry uint16, off uint32) []byte {
			d := first
			if off != 0 {
				d = last
			}
			return hp.eoFrag(hp.clientID, 1, retry, off, total, d)
		}
		query := func(seq uint64) []byte {
			return (&header{kind: kindPull, flags: flagFragment | flagExactlyOnce, session: hp.sess, token: hp.tok,
				clientID: hp.clientID, seq: seq}).Append(nil)
		}
		h, _ := hp.expect("resume query, nothing held", query(1), statusOK, 0, 0)
		if h.fragOff != 0 || h.total != 0 {
			t.Fatalf("resume query of nothing: %+v", h)
		}
		hp.expect("attempt 1, first fragment", f(1, 0), statusOK, fragChunk, 0)
		hp.expect("attempt 0, superseded", f(0, fragChunk), statusInProgress, fragChunk, 0)
		h, _ = hp.expect("resume query", query(1), statusOK, fragChunk, 0)
		if h.fragOff != fragChunk || h.total != total || h.reqType != 2 || h.flags != flagExactlyOnce|flagFragment {
			t.Fatalf("resume query: %+v, want the second fragment missing", h)
		}
		hp.expect("attempt 2 sends the held fragment again", f(2, 0), statusOK, fragChunk, 0)
		if st := hp.r.Stats(); st.FragmentsAgain != 1 {
			t.Fatalf("%d fragments acknowledged again, want 1", st.FragmentsAgain)
		}
		hp.expect("attempt 1, superseded by 2", f(1, fragChunk), statusInProgress, fragChunk, 0)
		h, b := hp.expect("attempt 2 completes what attempt 1 began", f(2, fragChunk), statusOK, 0, 0)
		if hp.runs[2] != 1 || h.flags != flagExactlyOnce|flagFragment || h.total != total || !bytes.Equal(b[eoHeaderLen:], first) {
			t.Fatalf("the response's first fragment: %d runs, %+v, %d bytes", hp.runs[2], h, len(b)-eoHeaderLen)
		}
		h, b = hp.expect("attempt 3's second fragment", f(3, fragChunk), statusOK, 0, 0)
		if h.flags&flagFragment == 0 || !bytes.Equal(b[eoHeaderLen:], first) {
			t.Fatalf("a copy of a request that ran: %+v, %d bytes", h, len(b)-eoHeaderLen)
		}
		pull := (&header{kind: kindPull, flags: flagFragment | flagExactlyOnce, session: hp.sess, token: hp.tok,
			clientID: hp.clientID, seq: 1, fragOff: fragChunk}).Append(nil)
		h, b = hp.expect("pull of the second fragment", pull, statusOK, 0, 0)
		if h.fragOff != fragChunk || !bytes.Equal(b[eoHeaderLen:], last) {
			t.Fatalf("pulled %+v, %d bytes", h, len(b)-eoHeaderLen)
		}
		bad := hp.r.Stats().BadMessages
		hp.expect("another client's id", hp.eoFrag(hp.clientID+1, 2, 0, 0, total, first), statusBadRequest, 0, 0)
		pull = (&header{kind: kindPull, flags: flagFragment | flagExactlyOnce, session: hp.sess, token: hp.tok,
			clientID: hp.clientID, seq: 9, fragOff: fragChunk}).Append(nil)
		hp.expect("pull of a request never made", pull, statusStale, 0, 0)
		const huge = 20 * fragChunk
		hp.expect("a resumed attempt beyond the window, nothing held", hp.eoFrag(hp.clientID, 3, 1, MaxFragmentWindow*fragChunk, huge, first),
			statusInProgress, 0, 1)
		if st := hp.r.Stats(); hp.runs[2] != 1 || st.Duplicates != 1 || st.BadMessages != bad+2 {
			t.Fatalf("%d runs, %d duplicates, %d bad", hp.runs[2], st.Duplicates, st.BadMessages-bad)
		}
	})
}

// TestLargeChargesStorage: a request's charge to LargeMessageBytes is the
// memory it takes, the storage its fragments in order call for (which
// doubles as it grows) as well as the bytes: with room for 3.5
// fragments, the third in order, which calls for storage of four, is
// refused though its bytes would fit.
func TestLargeChargesStorage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hp := newHostileLargeBudget(t, 74, 3*fragChunk+fragChunk/2)
		defer hp.close()
		const eight = 8 << 20
		hp.expect("first in order", hp.frag(1, 0, eight, hp.chunk), statusOK, fragChunk, 0)
		hp.expect("second in order", hp.frag(1, fragChunk, eight, hp.chunk), statusOK, 2*fragChunk, 0)
		hp.expect("third, calling for room of four", hp.frag(1, 2*fragChunk, eight, hp.chunk), statusServerBusy, 0, 1)
		hp.expect("a fresh message", hp.frag(2, 0, eight, hp.chunk), statusOK, fragChunk, 0)
		hp.expect("ahead", hp.frag(2, 2*fragChunk, eight, hp.chunk), statusOK, 2*fragChunk, 0)
		hp.expect("the gap, its run three in all", hp.frag(2, fragChunk, eight, hp.chunk), statusOK, 3*fragChunk, 0)
	})
}

// TestLargeBytesPerHost: the large messages of one client host hold at
// most its share of LargeMessageBytes (LargeMessageBytesPerHost, by
// default a quarter): its fragment beyond it is refused as beyond the
// budget (retryably) while another host's fragments are taken, and once
// its messages time out its share is whole again.
func TestLargeBytesPerHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hp := newHostileLargeShare(t, 75, 8*fragChunk, 0) // a host's share: 2 fragments
		defer hp.close()
		const eight = 8 << 20
		hp.expect("host A's first message", hp.frag(1, 0, eight, hp.chunk), statusOK, fragChunk, 0)
		hp.expect("host A's second message", hp.frag(2, 0, eight, hp.chunk), statusOK, 2*fragChunk, 0)
		hp.expect("host A's third, beyond its share", hp.frag(3, 0, eight, hp.chunk), statusServerBusy, 2*fragChunk, 1)
		hp.expect("host A's first, grown beyond its share", hp.frag(1, fragChunk, eight, hp.chunk), statusServerBusy, fragChunk, 1)
		if st := hp.r.Stats(); st.LargeRefusedPerHost != 2 {
			t.Errorf("stats: %d fragments refused for their host's share, want 2", st.LargeRefusedPerHost)
		}
		hp.connectFrom(netip.MustParseAddr("10.3.0.3"), 100)
		hp.expect("host B's message", hp.frag(1, 0, eight, hp.chunk), statusOK, 2*fragChunk, 0)
		hp.expect("host B's second", hp.frag(2, 0, eight, hp.chunk), statusOK, 3*fragChunk, 0)
		time.Sleep(2100 * time.Millisecond) // MessageTimeout
		hp.r.large.mu.Lock()
		hosts := len(hp.r.large.hosts)
		hp.r.large.mu.Unlock()
		if st := hp.r.Stats(); st.LargeBytes != 0 || hosts != 0 {
			t.Fatalf("after MessageTimeout: %d bytes held, the shares of %d hosts kept", st.LargeBytes, hosts)
		}
	})
}
