package erpc

import (
	"fmt"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/internal/testkit/socktest"
	"github.com/homa-go/homa/sock"
)

// TestLeaseManyClients: 10,000 clients arrive one every 2 ms from 16
// hosts in turn, each connects under a client id of its own, makes one
// exactly-once request and vanishes. With the default limits (4,096
// sessions, a fifth of them per host, LeaseTimeout 4 s) every one
// connects: the server's table never holds more than the
// clients of the last 5/4 lease (2,500 at this rate, plus one tick), and
// it is empty once the last lease has passed. The server spends nothing
// per idle session: one tick of its Nexus per quarter lease.
func TestLeaseManyClients(t *testing.T) {
	clients := 10_000
	if testing.Short() {
		clients = 2_000
	}
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 53})
		defer nw.Close()
		host := netip.MustParseAddr("10.2.0.1")
		open := func(a netip.AddrPort) (*sock.Socket, error) {
			c, err := socktest.OpenMem(nw, a, testConfig())
			if err != nil {
				return nil, err
			}
			return c, nil
		}
		nx, err := NewNexus(netip.AddrPortFrom(host, 2000), &Config{Open: open})
		if err != nil {
			t.Fatal(err)
		}
		defer nx.Close()
		_ = nx.Register(1, answerOK, Dispatch)
		r, stop := serveRpc(t, nx)
		defer stop()

		const hosts = 16
		peers := make([]rawPeer, hosts)
		for k := range peers {
			cs, err := open(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 2, 1, byte(k)}), 0))
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			peers[k] = rawPeer{t, cs}
		}
		maxSessions := 0
		for i := range clients {
			p := peers[i%hosts]
			id := uint64(1000 + 2*i + 1)
			connect := (&connectBody{dstRpc: 0, srcRpc: 1, fresh: true, clientID: id}).Append((&header{kind: kindConnect}).Append(nil))
			h, b := p.call(nx.Addr(), connect)
			var body connectReplyBody
			if _, err := body.Parse(b); h.status != statusOK || err != nil {
				t.Fatalf("client %d of %d: connect status %d %v (server %+v)", i, clients, h.status, err, r.Stats())
			}
			req := header{kind: kindRequest, reqType: 1, flags: flagExactlyOnce, session: h.session, token: h.token,
				clientID: id, seq: 1, ackFloor: 1}
			rh, _ := p.call(netip.AddrPortFrom(host, body.port), append(req.Append(nil), fmt.Sprint(i)...))
			if rh.status != statusOK {
				t.Fatalf("client %d: request status %d", i, rh.status)
			}
			maxSessions = max(maxSessions, r.Stats().ServerSessions)
			time.Sleep(2 * time.Millisecond)
		}
		// 5/4 of 4 s at one client per 2 ms, and a tick's worth more.
		if limit := 2500 + 500; maxSessions > limit {
			t.Fatalf("server held %d sessions at once, want at most %d", maxSessions, limit)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		st := r.Stats()
		if st.ServerSessions != 0 || st.Records != 0 || st.RecordBytes != 0 {
			t.Fatalf("after the last lease: %+v", st)
		}
		if ns := nx.Stats(); ns.Leases != 0 || ns.LeasesExpired != uint64(clients) || ns.Refused != 0 {
			t.Fatalf("Nexus after the last lease: %+v", ns)
		}
		r.srvMu.Lock()
		held := len(r.srvHosts)
		r.srvMu.Unlock()
		if held != 0 || nx.leases.hosts() != 0 {
			t.Fatalf("after the last lease the server counts the sessions of %d hosts and the leases of %d", held, nx.leases.hosts())
		}
		t.Logf("%d clients; at most %d sessions held at once", clients, maxSessions)
	})
}
