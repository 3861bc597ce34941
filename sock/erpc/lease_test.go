package erpc_test

import (
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/sock/erpc"
)

// TestLeaseReclaimsVanishedClients is the reported case: a server with
// room for two sessions, three clients that call once and vanish without
// DestroySession (the third is refused while the first two hold the
// table). Once the lease has passed, the server has forgotten them and a
// new client connects.
func TestLeaseReclaimsVanishedClients(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 50})
		defer nw.Close()
		scfg := memConfig(nw)
		scfg.MaxServerSessions = 2
		srv := newServer(t, scfg, serverHost, func(nx *erpc.Nexus) {
			_ = nx.Register(1, echo, erpc.Dispatch)
		}, nil)
		defer srv.close()

		for i, host := range []netip.Addr{clientHost, otherHost, netip.MustParseAddr("10.0.0.4")} {
			cli := newClient(t, memConfig(nw), host)
			s, err := cli.rpc.CreateSession(netip.AddrPortFrom(serverHost, nexusPort), 0)
			if err != nil {
				t.Fatal(err)
			}
			cli.runUntil(t, time.Second, func() bool { _, ok := cli.rec.last(s); return ok })
			e, _ := cli.rec.last(s)
			if i < 2 {
				if e.ev != erpc.Connected {
					t.Fatalf("client %d: %v %v", i, e.ev, e.err)
				}
				c := cli.enqueue(t, s, 1, []byte("once"), erpc.ExactlyOnce)
				cli.runUntil(t, time.Second, allDone([]*call{c}))
				if c.err != nil {
					t.Fatalf("client %d: %v", i, c.err)
				}
			} else if e.ev != erpc.ConnectFailed || !errors.Is(e.err, erpc.ErrTooManySessions) {
				t.Fatalf("third client: %v %v, want ErrTooManySessions", e.ev, e.err)
			}
			cli.close() // gone, without DestroySession
		}
		if st := srv.rpc.Stats(); st.ServerSessions != 2 || st.Records == 0 {
			t.Fatalf("before the lease: %d sessions, %d records", st.ServerSessions, st.Records)
		}

		time.Sleep(5 * time.Second) // LeaseTimeout 4 s: forgotten by 5 s
		synctest.Wait()
		if st := srv.rpc.Stats(); st.ServerSessions != 0 || st.Records != 0 || st.RecordBytes != 0 || st.RecordsReserved != 0 {
			t.Fatalf("after the lease: %+v", st)
		}
		if st := srv.nx.Stats(); st.Leases != 0 || st.LeasesExpired != 2 {
			t.Fatalf("after the lease: Nexus %+v", st)
		}
		cli := newClient(t, memConfig(nw), netip.MustParseAddr("10.0.0.5"))
		defer cli.close()
		s := cli.connect(t, serverHost)
		c := cli.enqueue(t, s, 1, []byte("new"))
		cli.runUntil(t, time.Second, allDone([]*call{c}))
		if c.err != nil || string(c.data) != "new" {
			t.Fatalf("new client: %q %v", c.data, c.err)
		}
	})
}

// TestLeaseIdleClientStays: a client that sends nothing for many leases
// keeps its session through heartbeats, at most one per server host per
// quarter lease, whatever its number of sessions; a client that sends
// requests all along needs none.
func TestLeaseIdleClientStays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 51})
		defer nw.Close()
		srv := newServer(t, memConfig(nw), serverHost, func(nx *erpc.Nexus) {
			_ = nx.Register(1, echo, erpc.Dispatch)
		}, nil)
		defer srv.close()
		cli := newClient(t, memConfig(nw), clientHost)
		defer cli.close()
		var sessions []erpc.Session
		for range 4 {
			sessions = append(sessions, cli.connect(t, serverHost))
		}
		const idle = 20 * time.Second
		time.Sleep(idle) // the client's Rpc does not even run its loop
		hb := cli.nx.Stats().Heartbeats
		if max := uint64(idle/time.Second) + 1; hb == 0 || hb > max {
			t.Fatalf("%d heartbeats in %v, want 1..%d", hb, idle, max)
		}
		for _, s := range sessions {
			c := cli.enqueue(t, s, 1, []byte("still here"))
			cli.runUntil(t, time.Second, allDone([]*call{c}))
			if c.err != nil {
				t.Fatalf("after %v idle: %v", idle, c.err)
			}
		}
		if st := srv.nx.Stats(); st.LeasesExpired != 0 || st.Leases != 1 {
			t.Fatalf("server: %+v, want one lease, none expired", st)
		}

		// Busy: a request every 100 ms for 10 s, no heartbeat needed.
		time.Sleep(2 * time.Second) // past the tick that follows the last idle one
		hb = cli.nx.Stats().Heartbeats
		for range 100 {
			c := cli.enqueue(t, sessions[0], 1, []byte("busy"))
			cli.runUntil(t, time.Second, allDone([]*call{c}))
			time.Sleep(100 * time.Millisecond)
		}
		if got := cli.nx.Stats().Heartbeats; got > hb+1 {
			t.Fatalf("%d heartbeats while busy", got-hb)
		}
	})
}

// TestLeaseExpiredReported: a client cut off from its server for longer
// than the lease finds, when the network heals, its session reset with
// ErrLeaseExpired (its heartbeats have told it), and connects again under
// a new client id.
func TestLeaseExpiredReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var cut atomic.Bool
		nw := memnet.New(memnet.Config{Seed: 52, Drop: func(src, dst netip.Addr, _ []byte) bool {
			return cut.Load() && (src == clientHost || dst == clientHost)
		}})
		defer nw.Close()
		srv, cli, s := echoWorld(t, nw)

		cut.Store(true)
		time.Sleep(6 * time.Second)
		cut.Store(false)
		time.Sleep(2 * time.Second) // a heartbeat goes and is answered
		if st := srv.nx.Stats(); st.LeasesExpired != 1 {
			t.Fatalf("server: %+v", st)
		}
		c := cli.enqueue(t, s, 1, []byte("late"), erpc.ExactlyOnce)
		cli.runUntil(t, time.Second, allDone([]*call{c}))
		if !errors.Is(c.err, erpc.ErrLeaseExpired) || !errors.Is(c.err, erpc.ErrSessionReset) {
			t.Fatalf("request after the lease: %v, want ErrLeaseExpired", c.err)
		}
		if e, _ := cli.rec.last(s); e.ev != erpc.Reset || !errors.Is(e.err, erpc.ErrLeaseExpired) {
			t.Fatalf("event %v %v, want reset with ErrLeaseExpired", e.ev, e.err)
		}
		if err := cli.rpc.DestroySession(s); err != nil {
			t.Fatal(err)
		}
		s = cli.connect(t, serverHost)
		c = cli.enqueue(t, s, 1, []byte("again"), erpc.ExactlyOnce)
		cli.runUntil(t, time.Second, allDone([]*call{c}))
		if c.err != nil || string(c.data) != "again" {
			t.Fatalf("after reconnecting: %q %v", c.data, c.err)
		}
	})
}

// TestLeaseServerRestart: after the server restarts, a client whose
// client id the new server does not know connects new sessions under a
// new id without the application seeing the refusal, and its old
// session, once used, is reset with a message that says why.
func TestLeaseServerRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 54})
		defer nw.Close()
		register := func(nx *erpc.Nexus) { _ = nx.Register(1, echo, erpc.Dispatch) }
		srv := newServer(t, memConfig(nw), serverHost, register, nil)
		cli := newClient(t, memConfig(nw), clientHost)
		defer cli.close()
		old := cli.connect(t, serverHost)
		srv.close()
		srv = newServer(t, memConfig(nw), serverHost, register, nil)
		defer srv.close()

		s := cli.connect(t, serverHost) // refused as expired, then connected fresh
		c := cli.enqueue(t, s, 1, []byte("after"))
		cli.runUntil(t, time.Second, allDone([]*call{c}))
		if c.err != nil || string(c.data) != "after" {
			t.Fatalf("new session after the restart: %q %v", c.data, c.err)
		}
		if st := srv.nx.Stats(); st.Refused != 1 || st.Connects != 1 {
			t.Fatalf("server: %+v, want one refusal (the old id) and one connect", st)
		}
		c = cli.enqueue(t, old, 1, []byte("old"))
		cli.runUntil(t, time.Second, allDone([]*call{c}))
		if !errors.Is(c.err, erpc.ErrSessionReset) {
			t.Fatalf("old session: %v, want ErrSessionReset", c.err)
		}
	})
}
