package erpc_test

import (
	"errors"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/erpc"
)

// TestHandshake: a session is connected only after the server Rpc
// answered the connect; requests enqueued meanwhile go out then; the
// server holds a session until DestroySession tells it to let go.
func TestHandshake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 1})
		defer nw.Close()
		srv := newServer(t, memConfig(nw), serverHost, func(nx *erpc.Nexus) {
			_ = nx.Register(1, echo, erpc.Dispatch)
		}, nil)
		defer srv.close()
		cli := newClient(t, memConfig(nw), clientHost)
		defer cli.close()

		s, err := cli.rpc.CreateSession(netip.AddrPortFrom(serverHost, nexusPort), 0)
		if err != nil {
			t.Fatal(err)
		}
		if cli.rpc.IsConnected(s) {
			t.Fatal("connected before any reply")
		}
		early := cli.enqueue(t, s, 1, []byte("queued while connecting"))
		cli.runUntil(t, time.Second, func() bool { return early.done })
		if early.err != nil || string(early.data) != "queued while connecting" {
			t.Fatalf("early request: %q %v", early.data, early.err)
		}
		if e, ok := cli.rec.last(s); !ok || e.ev != erpc.Connected || e.err != nil {
			t.Fatalf("events %v, want connected", cli.rec.events)
		}
		if !cli.rpc.IsConnected(s) {
			t.Fatal("not connected after the Connected event")
		}
		if n := srv.rpc.Stats().ServerSessions; n != 1 {
			t.Fatalf("server holds %d sessions, want 1", n)
		}

		if err := cli.rpc.DestroySession(s); err != nil {
			t.Fatal(err)
		}
		cli.runUntil(t, time.Second, func() bool { e, _ := cli.rec.last(s); return e.ev == erpc.Disconnected })
		if e, _ := cli.rec.last(s); e.err != nil {
			t.Fatalf("disconnect: %v", e.err)
		}
		if n := srv.rpc.Stats().ServerSessions; n != 0 {
			t.Fatalf("server holds %d sessions after disconnect, want 0", n)
		}
		if _, err := cli.try(s, 1, []byte("x")); !errors.Is(err, erpc.ErrNoSession) {
			t.Fatalf("request on a destroyed session: %v, want ErrNoSession", err)
		}
	})
}

// TestConnectFailedNobodyAnswers: with no Nexus at the address, the
// transport declares the peer dead and the session fails to connect,
// with the transport's error; queued requests fail with it.
func TestConnectFailedNobodyAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 2})
		defer nw.Close()
		cli := newClient(t, memConfig(nw), clientHost)
		defer cli.close()

		s, err := cli.rpc.CreateSession(netip.AddrPortFrom(nobody, nexusPort), 0)
		if err != nil {
			t.Fatal(err)
		}
		q := cli.enqueue(t, s, 1, []byte("lost"))
		cli.runUntil(t, 5*time.Second, func() bool { _, ok := cli.rec.last(s); return ok })
		e, _ := cli.rec.last(s)
		if e.ev != erpc.ConnectFailed || !errors.Is(e.err, erpc.ErrConnectFailed) || !errors.Is(e.err, sock.ErrPeerTimeout) {
			t.Fatalf("event %v %v, want connect-failed matching ErrConnectFailed and sock.ErrPeerTimeout", e.ev, e.err)
		}
		cli.runUntil(t, time.Second, func() bool { return q.done })
		if !errors.Is(q.err, erpc.ErrConnectFailed) {
			t.Fatalf("queued request: %v, want ErrConnectFailed", q.err)
		}
		if cli.rpc.IsConnected(s) {
			t.Fatal("failed session reports connected")
		}
		if _, err := cli.try(s, 1, []byte("x")); !errors.Is(err, erpc.ErrNotConnected) {
			t.Fatalf("request on a failed session: %v, want ErrNotConnected", err)
		}
		if err := cli.rpc.DestroySession(s); err != nil {
			t.Fatalf("destroy a failed session: %v", err)
		}
	})
}

// TestConnectTimeout: a connect that gets no reply within ConnectTimeout
// fails with ErrTimeout, before the transport gives up.
func TestConnectTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 3})
		defer nw.Close()
		cfg := memConfig(nw)
		cfg.ConnectTimeout = 20 * time.Millisecond
		cli := newClient(t, cfg, clientHost)
		defer cli.close()
		s, err := cli.rpc.CreateSession(netip.AddrPortFrom(nobody, nexusPort), 0)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		cli.runUntil(t, 5*time.Second, func() bool { _, ok := cli.rec.last(s); return ok })
		e, _ := cli.rec.last(s)
		if e.ev != erpc.ConnectFailed || !errors.Is(e.err, erpc.ErrTimeout) {
			t.Fatalf("event %v %v, want connect-failed with ErrTimeout", e.ev, e.err)
		}
		if d := time.Since(start); d < cfg.ConnectTimeout {
			t.Fatalf("gave up after %v, before ConnectTimeout %v", d, cfg.ConnectTimeout)
		}
	})
}

// TestConnectFailedNoSuchRpc: the remote Nexus answers that it has no Rpc
// with the id asked for.
func TestConnectFailedNoSuchRpc(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 4})
		defer nw.Close()
		srv := newServer(t, memConfig(nw), serverHost, nil, nil)
		defer srv.close()
		cli := newClient(t, memConfig(nw), clientHost)
		defer cli.close()

		s, err := cli.rpc.CreateSession(netip.AddrPortFrom(serverHost, nexusPort), 7)
		if err != nil {
			t.Fatal(err)
		}
		cli.runUntil(t, time.Second, func() bool { _, ok := cli.rec.last(s); return ok })
		e, _ := cli.rec.last(s)
		if e.ev != erpc.ConnectFailed || !errors.Is(e.err, erpc.ErrNoSuchRpc) || !errors.Is(e.err, erpc.ErrConnectFailed) {
			t.Fatalf("event %v %v, want connect-failed with ErrNoSuchRpc", e.ev, e.err)
		}
		if n := srv.rpc.Stats().ServerSessions; n != 0 {
			t.Fatalf("server holds %d sessions", n)
		}
	})
}

// TestServerSessionLimit: a server Rpc refuses sessions beyond
// MaxServerSessions, with a retryable error (one client host may take
// them all here: TestServerSessionsPerHost tests the hosts' shares).
func TestServerSessionLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 5})
		defer nw.Close()
		scfg := memConfig(nw)
		scfg.MaxServerSessions, scfg.MaxServerSessionsPerHost = 2, 2
		srv := newServer(t, scfg, serverHost, nil, nil)
		defer srv.close()
		cli := newClient(t, memConfig(nw), clientHost)
		defer cli.close()
		cli.connect(t, serverHost)
		cli.connect(t, serverHost)
		s, err := cli.rpc.CreateSession(netip.AddrPortFrom(serverHost, nexusPort), 0)
		if err != nil {
			t.Fatal(err)
		}
		cli.runUntil(t, time.Second, func() bool { _, ok := cli.rec.last(s); return ok })
		e, _ := cli.rec.last(s)
		if e.ev != erpc.ConnectFailed || !errors.Is(e.err, erpc.ErrTooManySessions) || !errors.Is(e.err, erpc.ErrRetryable) {
			t.Fatalf("third session: %v %v, want connect-failed with ErrTooManySessions", e.ev, e.err)
		}
	})
}

// TestClientSessionLimit: CreateSession refuses beyond MaxSessions.
func TestClientSessionLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 6})
		defer nw.Close()
		cfg := memConfig(nw)
		cfg.MaxSessions = 1
		cli := newClient(t, cfg, clientHost)
		defer cli.close()
		if _, err := cli.rpc.CreateSession(netip.AddrPortFrom(serverHost, nexusPort), 0); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.rpc.CreateSession(netip.AddrPortFrom(serverHost, nexusPort), 0); !errors.Is(err, erpc.ErrTooManySessions) {
			t.Fatalf("second session: %v, want ErrTooManySessions", err)
		}
	})
}
