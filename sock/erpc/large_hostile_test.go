package erpc

import (
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
// holds one fragment; a claim above MaxMessage holds nothing; a fragment
// missing, repeated, overlapping, short or inconsistent drops its message;
// a message left unfinished goes after MessageTimeout; a pull of nothing
// is refused. The handler never runs.
func TestLargeHostile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 72})
		defer nw.Close()
		host := netip.MustParseAddr("10.3.0.1")
		open := func(a netip.AddrPort) (*sock.Socket, error) {
			c, err := socktest.OpenMem(nw, a, testConfig())
			if err != nil {
				return nil, err
			}
			return c, nil
		}
		const budget = 2*fragChunk + 10
		nx, err := NewNexus(netip.AddrPortFrom(host, 2000), &Config{Open: open, LargeMessageBytes: budget})
		if err != nil {
			t.Fatal(err)
		}
		defer nx.Close()
		runs := 0
		_ = nx.Register(1, func(h *ReqHandle) { runs++ }, Dispatch)
		r, stop := serveRpc(t, nx)
		defer stop()

		cs, err := open(netip.AddrPortFrom(netip.MustParseAddr("10.3.0.2"), 0))
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		p := rawPeer{t, cs}
		connect := (&connectBody{dstRpc: 0, srcRpc: 1, fresh: true, clientID: 99}).Append((&header{kind: kindConnect}).Append(nil))
		h, b := p.call(nx.Addr(), connect)
		var body connectReplyBody
		if _, err := body.Parse(b); h.status != statusOK || err != nil {
			t.Fatalf("connect: %+v %v", h, err)
		}
		rpcAddr := netip.AddrPortFrom(host, body.port)
		sess, tok := h.session, h.token

		chunk := make([]byte, fragChunk)
		frag := func(id, off, total uint32, data []byte) []byte {
			hd := header{kind: kindRequest, reqType: 1, flags: flagFragment, session: sess, token: tok, msgID: id, fragOff: off, total: total}
			return append(hd.Append(nil), data...)
		}
		expect := func(what string, msg []byte, want status, held int) {
			t.Helper()
			if h, _ := p.call(rpcAddr, msg); h.status != want {
				t.Fatalf("%s: status %d, want %d", what, h.status, want)
			}
			if st := r.Stats(); st.LargeBytes != held {
				t.Fatalf("%s: %d bytes held, want %d", what, st.LargeBytes, held)
			}
		}
		const eight = 8 << 20
		expect("first fragment of a claimed 8 MiB", frag(1, 0, eight, chunk), statusOK, fragChunk)
		expect("a claim of 1 GiB", frag(2, 0, 1<<30, chunk), statusTooLarge, fragChunk)
		expect("a gap", frag(1, 2*fragChunk, eight, chunk), statusBadRequest, 0)
		expect("restart", frag(1, 0, eight, chunk), statusOK, fragChunk)
		expect("overlap", frag(1, fragChunk/2, eight, chunk), statusBadRequest, 0)
		expect("restart", frag(1, 0, eight, chunk), statusOK, fragChunk)
		expect("second fragment", frag(1, fragChunk, eight, chunk), statusOK, 2*fragChunk)
		expect("again at the same offset", frag(1, fragChunk, eight, chunk), statusBadRequest, 0)
		expect("short fragment not the last", frag(3, 0, eight, chunk[:1000]), statusBadRequest, 0)
		expect("total changed", frag(4, 0, eight, chunk), statusOK, fragChunk)
		expect("total changed", frag(4, fragChunk, eight-1, chunk), statusBadRequest, 0)
		expect("a small message as fragments", frag(5, 0, 1000, chunk[:1000]), statusTooLarge, 0)

		// The budget: two fragments fit, the third does not, and the
		// messages it would have grown are dropped.
		expect("budget 1", frag(6, 0, eight, chunk), statusOK, fragChunk)
		expect("budget 2", frag(7, 0, eight, chunk), statusOK, 2*fragChunk)
		expect("over budget", frag(7, fragChunk, eight, chunk), statusServerBusy, fragChunk)

		// Data beyond the claimed total does not parse.
		expect("beyond the total", frag(8, 0, 10, chunk[:20]), statusBadRequest, fragChunk)

		// A pull of a response that does not exist.
		pull := (&header{kind: kindPull, flags: flagFragment, session: sess, token: tok, msgID: 77, fragOff: fragChunk}).Append(nil)
		expect("pull of nothing", pull, statusStale, fragChunk)

		// Left unfinished: gone after MessageTimeout.
		time.Sleep(2100 * time.Millisecond)
		if st := r.Stats(); st.LargeBytes != 0 || st.LargeExpired != 1 {
			t.Fatalf("after MessageTimeout: %d bytes, %d expired", st.LargeBytes, st.LargeExpired)
		}
		if runs != 0 {
			t.Fatalf("handler ran %d times", runs)
		}
	})
}
