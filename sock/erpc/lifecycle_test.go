package erpc_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/sock/erpc"
)

// TestRunEventLoopOnce: the non-blocking loop makes progress when called
// repeatedly, and refuses to run inside itself.
func TestRunEventLoopOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 50})
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
		c := cli.enqueue(t, s, 1, []byte("polled"))
		var inner error
		for i := 0; !c.done; i++ {
			if i == 1000 {
				t.Fatal("no progress in 1000 calls")
			}
			if err := cli.rpc.RunEventLoopOnce(); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		if c.err != nil || string(c.data) != "polled" {
			t.Fatalf("request: %q %v", c.data, c.err)
		}
		if err := cli.rpc.EnqueueRequest(s, 1, mustBuf(t, cli.rpc, 1), mustBuf(t, cli.rpc, 0), func(*erpc.MsgBuffer, any, error) {
			inner = cli.rpc.RunEventLoopOnce()
		}, nil); err != nil {
			t.Fatal(err)
		}
		cli.runUntil(t, time.Second, func() bool { return inner != nil })
		if !errors.Is(inner, erpc.ErrInEventLoop) {
			t.Fatalf("RunEventLoopOnce inside the loop: %v", inner)
		}
	})
}

// TestStopEventLoop: a continuation ends Serve.
func TestStopEventLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 51})
		defer nw.Close()
		_, cli, s := echoWorld(t, nw)
		if err := cli.rpc.EnqueueRequest(s, 1, mustBuf(t, cli.rpc, 4), mustBuf(t, cli.rpc, 0), func(_ *erpc.MsgBuffer, _ any, err error) {
			if err != nil {
				t.Error(err)
			}
			cli.rpc.StopEventLoop()
		}, nil); err != nil {
			t.Fatal(err)
		}
		if err := cli.rpc.Serve(context.Background()); err != nil {
			t.Fatalf("Serve after StopEventLoop: %v", err)
		}
		cli.rpc.StopEventLoop() // outside the loop: no effect on the next run
		if err := cli.rpc.RunEventLoop(time.Millisecond); err != nil {
			t.Fatal(err)
		}
	})
}

// TestDestroyWhileConnecting: a session destroyed before its connect reply
// is freed at once and reported disconnected; the late reply changes
// nothing.
func TestDestroyWhileConnecting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 52, Delay: time.Millisecond})
		defer nw.Close()
		srv := newServer(t, memConfig(nw), serverHost, nil, nil)
		defer srv.close()
		cli := newClient(t, memConfig(nw), clientHost)
		defer cli.close()
		s, err := cli.rpc.CreateSession(netip.AddrPortFrom(serverHost, nexusPort), 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := cli.rpc.DestroySession(s); err != nil {
			t.Fatal(err)
		}
		cli.runUntil(t, time.Second, func() bool { _, ok := cli.rec.last(s); return ok })
		if e, _ := cli.rec.last(s); e.ev != erpc.Disconnected {
			t.Fatalf("event %v, want disconnected", e.ev)
		}
		if err := cli.rpc.RunEventLoop(10 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if len(cli.rec.events) != 1 {
			t.Fatalf("events %v, want only the disconnect", cli.rec.events)
		}
		if cli.rpc.IsConnected(s) {
			t.Fatal("destroyed session connected")
		}
	})
}

// TestNexusCloseStopsLoop: closing the Nexus from another goroutine ends
// the Rpc's event loop with ErrClosed, and the pending request's
// continuation runs with ErrClosed.
func TestNexusCloseStopsLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 53})
		defer nw.Close()
		srv := newServer(t, memConfig(nw), serverHost, func(nx *erpc.Nexus) {
			_ = nx.Register(1, func(*erpc.ReqHandle) {}, erpc.Dispatch) // never answers
		}, nil)
		defer srv.close()
		cli := newClient(t, memConfig(nw), clientHost)
		defer cli.close()
		s := cli.connect(t, serverHost)
		c := cli.enqueue(t, s, 1, []byte("pending"))
		go func() {
			time.Sleep(10 * time.Millisecond)
			cli.nx.Close()
		}()
		if err := cli.rpc.Serve(context.Background()); !errors.Is(err, erpc.ErrClosed) {
			t.Fatalf("Serve: %v, want ErrClosed", err)
		}
		if !c.done || !errors.Is(c.err, erpc.ErrClosed) {
			t.Fatalf("pending request: %v %v", c.done, c.err)
		}
		if _, err := cli.nx.NewRpc(1, nil); !errors.Is(err, erpc.ErrClosed) {
			t.Fatalf("NewRpc after close: %v", err)
		}
	})
}

// TestManyRpcs: a Nexus with one Rpc per goroutine; sessions name the Rpc
// they go to, and each request is served by that Rpc's loop.
func TestManyRpcs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 54})
		defer nw.Close()
		nx, err := erpc.NewNexus(netip.AddrPortFrom(serverHost, nexusPort), memConfig(nw))
		if err != nil {
			t.Fatal(err)
		}
		defer nx.Close()
		_ = nx.Register(1, func(h *erpc.ReqHandle) {
			_ = respond(h, []byte{h.Rpc().ID()})
		}, erpc.Dispatch)
		const rpcs = 3
		var servers []*server
		for id := range uint8(rpcs) {
			r, err := nx.NewRpc(id, nil)
			if err != nil {
				t.Fatal(err)
			}
			s := &server{nx: nx, rpc: r}
			s.start()
			servers = append(servers, s)
		}
		defer func() {
			for _, s := range servers {
				s.stop()
				s.rpc.Close()
			}
		}()
		cli := newClient(t, memConfig(nw), clientHost)
		defer cli.close()
		var calls []*call
		for id := range uint8(rpcs) {
			s, err := cli.rpc.CreateSession(nx.Addr(), id)
			if err != nil {
				t.Fatal(err)
			}
			calls = append(calls, cli.enqueue(t, s, 1, []byte("who?")))
		}
		cli.runUntil(t, time.Second, allDone(calls))
		for id, c := range calls {
			if c.err != nil || len(c.data) != 1 || c.data[0] != byte(id) {
				t.Fatalf("session to Rpc %d answered by %v, %v", id, c.data, c.err)
			}
			if n := servers[id].rpc.Stats().RequestsServed; n != 1 {
				t.Fatalf("Rpc %d served %d requests", id, n)
			}
		}
	})
}
