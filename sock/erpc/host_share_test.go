package erpc

import (
	"net/netip"
	"testing"
	"testing/synctest"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/internal/testkit/socktest"
	"github.com/homa-go/homa/sock"
)

// Hosts of the in-memory network of the tests in this package.
var (
	shareServer = netip.MustParseAddr("10.4.0.1")
	hostA       = netip.MustParseAddr("10.4.0.2")
	hostB       = netip.MustParseAddr("10.4.0.3")
	hostC       = netip.MustParseAddr("10.4.0.4")
)

// shareWorld is a server Nexus with cfg (on its own in-memory network)
// serving Rpc 0, and a way to connect to it from a socket of one's own.
type shareWorld struct {
	t  *testing.T
	nw *memnet.Network
	nx *Nexus
	r  *Rpc
}

// newShareWorld makes a shareWorld whose Nexus has the handlers that
// register (if set) registers.
func newShareWorld(t *testing.T, cfg Config, register func(*Nexus)) *shareWorld {
	w := &shareWorld{t: t, nw: memnet.New(memnet.Config{Seed: 71})}
	t.Cleanup(func() { w.nw.Close() })
	cfg.Open = func(a netip.AddrPort) (*sock.Socket, error) { return socktest.OpenMem(w.nw, a, testConfig()) }
	nx, err := NewNexus(netip.AddrPortFrom(shareServer, 2000), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nx.Close() })
	w.nx = nx
	if register != nil {
		register(nx)
	}
	var stop func()
	w.r, stop = serveRpc(t, nx)
	t.Cleanup(stop)
	return w
}

// peer is a socket of its own at host.
func (w *shareWorld) peer(host netip.Addr) rawPeer {
	s, err := socktest.OpenMem(w.nw, netip.AddrPortFrom(host, 0), testConfig())
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { s.Close() })
	return rawPeer{w.t, s}
}

// connect connects p under client id (a new one: fresh) and returns the
// reply's header.
func (w *shareWorld) connect(p rawPeer, id uint64, fresh bool) header {
	w.t.Helper()
	msg := (&connectBody{dstRpc: 0, srcRpc: 1, fresh: fresh, clientID: id}).Append((&header{kind: kindConnect}).Append(nil))
	h, _ := p.call(w.nx.Addr(), msg)
	return h
}

// One client host holds at most its share of a server Rpc's sessions
// (MaxServerSessionsPerHost, by default a fifth of MaxServerSessions),
// whatever its ports: its connects beyond it are refused as too many
// sessions while another host's are taken, and a session it ends makes
// room for another of its own.
func TestServerSessionsPerHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newShareWorld(t, Config{MaxServerSessions: 10}, nil) // a host's share: 2
		a1, a2, b := w.peer(hostA), w.peer(hostA), w.peer(hostB)
		first := w.connect(a1, 11, true)
		if first.status != statusOK || w.connect(a2, 11, false).status != statusOK {
			t.Fatal("host A's sessions within its share refused")
		}
		if h := w.connect(a1, 11, false); h.status != statusTooManySessions {
			t.Errorf("host A's session beyond its share: status %d, want %d (too many sessions)", h.status, statusTooManySessions)
		}
		if st := w.nx.Stats(); st.Refused != 1 || st.RefusedPerHost != 1 {
			t.Errorf("Nexus stats: %d connects refused, %d for their host's share; want 1 and 1", st.Refused, st.RefusedPerHost)
		}
		if w.connect(b, 21, true).status != statusOK || w.connect(b, 21, false).status != statusOK {
			t.Error("host B's sessions refused while host A holds its share")
		}
		disc := (&disconnectBody{dstRpc: 0}).Append((&header{kind: kindDisconnect, session: first.session, token: first.token}).Append(nil))
		if h, _ := a1.call(w.nx.Addr(), disc); h.status != statusOK {
			t.Fatalf("disconnect: status %d", h.status)
		}
		if h := w.connect(a2, 11, false); h.status != statusOK {
			t.Errorf("host A's session after it ended one: status %d", h.status)
		}
	})
}

// One client host holds at most its share of a server Nexus's leases
// (MaxLeasesPerHost, by default a fifth of MaxLeases), one per client:
// its new clients beyond it are refused as too many sessions while
// another host's are taken, and a lease made for a connect that the
// server then refused goes again.
func TestLeasesPerHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newShareWorld(t, Config{MaxLeases: 10, MaxServerSessions: 4}, nil) // a host's shares: 2 leases, 1 session
		a1, a2 := w.peer(hostA), w.peer(hostA)
		if h := w.connect(a1, 11, true); h.status != statusOK {
			t.Fatalf("host A's first client: status %d", h.status)
		}
		// Its second client's lease fits, its session does not: the
		// lease goes with the refusal.
		if h := w.connect(a2, 12, true); h.status != statusTooManySessions {
			t.Errorf("host A's second client, its session share full: status %d", h.status)
		}
		if n := w.nx.Stats().Leases; n != 1 {
			t.Errorf("%d leases after a refused connect, want 1", n)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		w := newShareWorld(t, Config{MaxLeases: 10}, nil) // a host's share: 2 leases
		a1, a2, b := w.peer(hostA), w.peer(hostA), w.peer(hostB)
		for id := uint64(11); id <= 12; id++ {
			if h := w.connect(a1, id, true); h.status != statusOK {
				t.Fatalf("host A's client %d, within its share: status %d", id, h.status)
			}
		}
		if h := w.connect(a2, 13, true); h.status != statusTooManySessions {
			t.Errorf("host A's client beyond its share of leases: status %d, want %d (too many sessions)", h.status, statusTooManySessions)
		}
		if st := w.nx.Stats(); st.Refused != 1 || st.RefusedPerHost != 1 {
			t.Errorf("Nexus stats: %d connects refused, %d for their host's share; want 1 and 1", st.Refused, st.RefusedPerHost)
		}
		if h := w.connect(a2, 11, false); h.status != statusOK {
			t.Errorf("a client of host A with a lease, another session: status %d", h.status)
		}
		for id := uint64(21); id <= 22; id++ {
			if h := w.connect(b, id, true); h.status != statusOK {
				t.Errorf("host B's client %d while host A holds its share: status %d", id, h.status)
			}
		}
		if n := w.nx.Stats().Leases; n != 4 {
			t.Errorf("%d leases, want 4", n)
		}
	})
}
