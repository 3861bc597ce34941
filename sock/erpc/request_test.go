package erpc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/erpc"
)

// heldRequests sends n one-byte requests (byte i for the i-th) to a
// server on nw (configuration scfg) whose dispatch handler holds them
// until it has n, then hands them to answer, which answers them; it
// checks that each came back with its own byte and returns the client,
// to be closed with the server by done.
func heldRequests(t *testing.T, nw *memnet.Network, scfg *erpc.Config, n int, answer func(held []*erpc.ReqHandle)) (cli *client, done func()) {
	t.Helper()
	var held []*erpc.ReqHandle
	srv := newServer(t, scfg, serverHost, func(nx *erpc.Nexus) {
		// The handler runs in the server's event loop only.
		_ = nx.Register(1, func(h *erpc.ReqHandle) {
			held = append(held, h)
			if len(held) < n {
				return
			}
			answer(held)
			held = nil
		}, erpc.Dispatch)
	}, nil)
	cli = newClient(t, memConfig(nw), clientHost)
	s := cli.connect(t, serverHost)
	calls := make([]*call, n)
	for i := range calls {
		calls[i] = cli.enqueue(t, s, 1, []byte{byte(i)})
	}
	cli.runUntil(t, time.Second, allDone(calls))
	for i, c := range calls {
		if c.err != nil || !bytes.Equal(c.data, []byte{byte(i)}) {
			t.Fatalf("request %d: %v %v", i, c.data, c.err)
		}
	}
	return cli, func() { cli.close(); srv.close() }
}

// TestOutOfOrder: requests of one session complete in the order the
// server answers them, not the order they were sent.
func TestOutOfOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 10})
		defer nw.Close()
		cli, done := heldRequests(t, nw, memConfig(nw), 4, func(held []*erpc.ReqHandle) {
			for i := len(held) - 1; i >= 0; i-- { // last first
				echo(held[i])
			}
		})
		defer done()
		var order []int
		for _, c := range cli.completed {
			order = append(order, int(c.data[0]))
		}
		if fmt.Sprint(order) != "[3 2 1 0]" {
			t.Fatalf("completion order %v, want [3 2 1 0]", order)
		}
	})
}

// TestWindowAndQueue: no more than SessionWindow requests of a session are
// at the server at once; the rest wait in the session's queue and go out
// as earlier ones complete; the queue is bounded.
func TestWindowAndQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 11})
		defer nw.Close()
		var atServer, most atomic.Int32
		var wg sync.WaitGroup
		defer wg.Wait()
		srv := newServer(t, memConfig(nw), serverHost, func(nx *erpc.Nexus) {
			_ = nx.Register(1, func(h *erpc.ReqHandle) {
				k := atServer.Add(1)
				if k > most.Load() {
					most.Store(k)
				}
				// Answer 10 ms later from another goroutine, so that
				// every request the window lets through arrives first.
				wg.Add(1)
				go func() {
					defer wg.Done()
					time.Sleep(10 * time.Millisecond)
					atServer.Add(-1)
					echo(h)
				}()
			}, erpc.Dispatch)
		}, nil)
		defer srv.close()
		cfg := memConfig(nw)
		cfg.SessionWindow = 2
		cfg.MaxQueuedRequests = 8
		cli := newClient(t, cfg, clientHost)
		defer cli.close()
		s := cli.connect(t, serverHost)

		calls := make([]*call, 10)
		for i := range calls {
			calls[i] = cli.enqueue(t, s, 1, []byte{byte(i)})
		}
		if _, err := cli.try(s, 1, []byte("one too many")); !errors.Is(err, erpc.ErrQueueFull) || !errors.Is(err, erpc.ErrRetryable) {
			t.Fatalf("11th request: %v, want ErrQueueFull (retryable)", err)
		}
		cli.runUntil(t, 5*time.Second, allDone(calls))
		for i, c := range calls {
			if c.err != nil || !bytes.Equal(c.data, []byte{byte(i)}) {
				t.Fatalf("request %d: %v %v", i, c.data, c.err)
			}
		}
		if m := most.Load(); m != 2 {
			t.Fatalf("at most %d requests at the server at once, want the window, 2", m)
		}
	})
}

// TestNested: a dispatch handler issues its own request to another server
// and answers in that request's continuation.
func TestNested(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 12})
		defer nw.Close()
		// The back end upper-cases.
		back := newServer(t, memConfig(nw), otherHost, func(nx *erpc.Nexus) {
			_ = nx.Register(2, func(h *erpc.ReqHandle) {
				_ = respond(h, bytes.ToUpper(h.Request()))
			}, erpc.Dispatch)
		}, nil)
		defer back.close()

		// The front end asks the back end, then adds "!".
		var toBack erpc.Session
		front := newServer(t, memConfig(nw), serverHost, func(nx *erpc.Nexus) {
			_ = nx.Register(1, func(h *erpc.ReqHandle) {
				r := h.Rpc()
				req, _ := r.AllocMsgBuffer(len(h.Request()))
				copy(req.Data(), h.Request())
				resp, _ := r.AllocMsgBuffer(0)
				err := r.EnqueueRequest(toBack, 2, req, resp, func(resp *erpc.MsgBuffer, tag any, err error) {
					h := tag.(*erpc.ReqHandle)
					if err != nil {
						_ = respond(h, []byte(err.Error()))
					} else {
						_ = respond(h, append(resp.Data(), '!'))
					}
					r.FreeMsgBuffer(req)
					r.FreeMsgBuffer(resp)
				}, h)
				if err != nil {
					_ = respond(h, []byte(err.Error()))
				}
			}, erpc.Dispatch)
		}, func(r *erpc.Rpc) {
			var err error
			toBack, err = r.CreateSession(netip.AddrPortFrom(otherHost, nexusPort), 0)
			if err != nil {
				t.Fatal(err)
			}
		})
		defer front.close()

		cli := newClient(t, memConfig(nw), clientHost)
		defer cli.close()
		s := cli.connect(t, serverHost)
		calls := []*call{cli.enqueue(t, s, 1, []byte("nested")), cli.enqueue(t, s, 1, []byte("calls"))}
		cli.runUntil(t, time.Second, allDone(calls))
		for i, want := range []string{"NESTED!", "CALLS!"} {
			if calls[i].err != nil || string(calls[i].data) != want {
				t.Fatalf("call %d: %q %v, want %q", i, calls[i].data, calls[i].err, want)
			}
		}
		if n := back.rpc.Stats().RequestsServed; n != 2 {
			t.Fatalf("back end served %d requests, want 2", n)
		}
	})
}

// TestBackground: a background handler runs off the event loop, which
// keeps serving dispatch requests while it works; it answers from its
// worker. A full background queue refuses requests with a retryable error.
func TestBackground(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 13})
		defer nw.Close()
		release := make(chan struct{})
		var started atomic.Int32
		scfg := memConfig(nw)
		scfg.BackgroundThreads = 1
		scfg.BackgroundQueue = 1
		srv := newServer(t, scfg, serverHost, func(nx *erpc.Nexus) {
			if err := nx.Register(1, func(h *erpc.ReqHandle) {
				started.Add(1)
				<-release
				_ = respond(h, append([]byte("slow "), h.Request()...))
			}, erpc.Background); err != nil {
				t.Fatal(err)
			}
			_ = nx.Register(2, echo, erpc.Dispatch)
		}, nil)
		defer srv.close()
		cli := newClient(t, memConfig(nw), clientHost)
		defer cli.close()
		s := cli.connect(t, serverHost)

		slow := cli.enqueue(t, s, 1, []byte("a"))
		cli.runUntil(t, time.Second, func() bool { return started.Load() == 1 })
		queued := cli.enqueue(t, s, 1, []byte("b")) // waits in the queue of 1
		cli.runUntil(t, time.Second, func() bool { return srv.rpc.Stats().RequestsServed == 2 })
		refused := cli.enqueue(t, s, 1, []byte("c"))
		fast := cli.enqueue(t, s, 2, []byte("fast"))
		cli.runUntil(t, time.Second, allDone([]*call{refused, fast}))
		if !errors.Is(refused.err, erpc.ErrServerBusy) || !errors.Is(refused.err, erpc.ErrRetryable) {
			t.Fatalf("third background request: %v, want ErrServerBusy", refused.err)
		}
		if fast.err != nil || string(fast.data) != "fast" {
			t.Fatalf("dispatch request while the worker is busy: %q %v", fast.data, fast.err)
		}
		if slow.done || queued.done {
			t.Fatal("background requests done before their handler was released")
		}
		close(release)
		cli.runUntil(t, time.Second, allDone([]*call{slow, queued}))
		if string(slow.data) != "slow a" || string(queued.data) != "slow b" {
			t.Fatalf("background responses %q %q", slow.data, queued.data)
		}
	})
}

// TestServerDeath: when the server stops answering, the transport declares
// it dead: every pending request of the session (in the window and queued)
// fails with ErrSessionReset matching sock.ErrPeerTimeout, the handler
// gets Reset, and the buffers are the application's again (the
// continuation frees them, which panics if the layer still held them).
func TestServerDeath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var dead atomic.Bool
		nw := memnet.New(memnet.Config{Seed: 14, Drop: func(src, dst netip.Addr, _ []byte) bool {
			return dead.Load() && (src == serverHost || dst == serverHost)
		}})
		defer nw.Close()
		var held []*erpc.ReqHandle
		srv := newServer(t, memConfig(nw), serverHost, func(nx *erpc.Nexus) {
			_ = nx.Register(1, func(h *erpc.ReqHandle) { held = append(held, h) }, erpc.Dispatch)
		}, nil)
		defer srv.close()
		cfg := memConfig(nw)
		cfg.SessionWindow = 2
		cli := newClient(t, cfg, clientHost)
		defer cli.close()
		s := cli.connect(t, serverHost)
		calls := make([]*call, 5)
		for i := range calls {
			calls[i] = cli.enqueue(t, s, 1, []byte{byte(i)})
		}
		cli.runUntil(t, time.Second, func() bool { return srv.rpc.Stats().RequestsServed == 2 })
		dead.Store(true)
		cli.runUntil(t, 5*time.Second, allDone(calls))
		for i, c := range calls {
			if !errors.Is(c.err, erpc.ErrSessionReset) || !errors.Is(c.err, sock.ErrPeerTimeout) {
				t.Fatalf("request %d: %v, want ErrSessionReset and sock.ErrPeerTimeout", i, c.err)
			}
		}
		var resets int
		for _, e := range cli.rec.events {
			if e.s == s && e.ev == erpc.Reset {
				resets++
				if !errors.Is(e.err, sock.ErrPeerTimeout) {
					t.Fatalf("reset event: %v", e.err)
				}
			}
		}
		if resets != 1 {
			t.Fatalf("%d reset events, want 1: %v", resets, cli.rec.events)
		}
		if cli.rpc.IsConnected(s) {
			t.Fatal("reset session reports connected")
		}
		if _, err := cli.try(s, 1, []byte("x")); !errors.Is(err, erpc.ErrNotConnected) {
			t.Fatalf("request on a reset session: %v", err)
		}
		if err := cli.rpc.DestroySession(s); err != nil {
			t.Fatal(err)
		}
		if st := cli.rpc.Stats(); st.SessionResets != 1 {
			t.Fatalf("SessionResets %d, want 1", st.SessionResets)
		}
	})
}

// TestErrors: the errors a client sees for an unknown request type, a
// message too large, and a closed Rpc match this package's errors and the
// transport's.
func TestErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 15})
		defer nw.Close()
		srv := newServer(t, memConfig(nw), serverHost, func(nx *erpc.Nexus) {
			_ = nx.Register(1, echo, erpc.Dispatch)
		}, nil)
		defer srv.close()
		cli := newClient(t, memConfig(nw), clientHost)
		s := cli.connect(t, serverHost)

		unknown := cli.enqueue(t, s, 9, []byte("?"))
		cli.runUntil(t, time.Second, func() bool { return unknown.done })
		if !errors.Is(unknown.err, erpc.ErrNoSuchService) {
			t.Fatalf("unknown type: %v, want ErrNoSuchService", unknown.err)
		}
		if !cli.rpc.IsConnected(s) {
			t.Fatal("an unknown type broke the session")
		}

		if _, err := cli.rpc.AllocMsgBuffer(8<<20 + 1); !errors.Is(err, erpc.ErrMessageTooLarge) || !errors.Is(err, sock.ErrMessageTooLong) {
			t.Fatalf("oversized buffer: %v, want ErrMessageTooLarge and sock.ErrMessageTooLong", err)
		}
		// The largest message goes through whole.
		big := make([]byte, erpc.MaxMsgSize)
		for i := range big {
			big[i] = byte(i * 7)
		}
		c := cli.enqueue(t, s, 1, big)
		cli.runUntil(t, 5*time.Second, func() bool { return c.done })
		if c.err != nil || !bytes.Equal(c.data, big) {
			t.Fatalf("largest message: %d bytes back, %v", len(c.data), c.err)
		}

		pending := cli.enqueue(t, s, 1, []byte("pending at close"))
		cli.close()
		if !pending.done || !errors.Is(pending.err, erpc.ErrClosed) {
			t.Fatalf("request pending at close: done %v, %v", pending.done, pending.err)
		}
		if _, err := cli.try(s, 1, []byte("x")); !errors.Is(err, erpc.ErrClosed) || !errors.Is(err, net.ErrClosed) || !errors.Is(err, sock.ErrClosed) {
			t.Fatalf("request after close: %v, want ErrClosed matching net.ErrClosed", err)
		}
		if err := cli.rpc.RunEventLoop(time.Millisecond); !errors.Is(err, erpc.ErrClosed) {
			t.Fatalf("event loop after close: %v", err)
		}
	})
}

// TestCall: the blocking form runs the loop for the caller, and gives up
// when its context ends.
func TestCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 16})
		defer nw.Close()
		srv := newServer(t, memConfig(nw), serverHost, func(nx *erpc.Nexus) {
			_ = nx.Register(1, echo, erpc.Dispatch)
			_ = nx.Register(2, func(*erpc.ReqHandle) {}, erpc.Dispatch) // never answers
		}, nil)
		defer srv.close()
		cli := newClient(t, memConfig(nw), clientHost)
		defer cli.close()
		s := cli.connect(t, serverHost)

		resp, err := cli.rpc.Call(context.Background(), s, 1, []byte("blocking"))
		if err != nil || string(resp) != "blocking" {
			t.Fatalf("Call: %q %v", resp, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if _, err := cli.rpc.Call(ctx, s, 2, []byte("never")); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Call without an answer: %v, want context.DeadlineExceeded", err)
		}
		// The abandoned request left the window: the session still works.
		resp, err = cli.rpc.Call(context.Background(), s, 1, []byte("again"))
		if err != nil || string(resp) != "again" {
			t.Fatalf("Call after an abandoned one: %q %v", resp, err)
		}
		// Not from inside the event loop.
		var inner error
		if err := cli.rpc.EnqueueRequest(s, 1, mustBuf(t, cli.rpc, 1), mustBuf(t, cli.rpc, 0), func(*erpc.MsgBuffer, any, error) {
			_, inner = cli.rpc.Call(context.Background(), s, 1, []byte("y"))
		}, nil); err != nil {
			t.Fatal(err)
		}
		cli.runUntil(t, time.Second, func() bool { return inner != nil })
		if !errors.Is(inner, erpc.ErrInEventLoop) {
			t.Fatalf("Call from a continuation: %v, want ErrInEventLoop", inner)
		}
	})
}

func mustBuf(t *testing.T, r *erpc.Rpc, n int) *erpc.MsgBuffer {
	t.Helper()
	m, err := r.AllocMsgBuffer(n)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestTurnSendsResponsesTogether: the responses a turn of the server's
// event loop gives leave together when the turn ends, one write to the
// socket for all of them, not one each.
func TestTurnSendsResponsesTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 12})
		defer nw.Close()
		var (
			mu      sync.Mutex
			sockets []*sock.Socket // the server Nexus's sockets
		)
		cfg := memConfig(nw)
		open := cfg.Open
		cfg.Open = func(a netip.AddrPort) (*sock.Socket, error) {
			s, err := open(a)
			if err == nil && a.Addr() == serverHost {
				mu.Lock()
				sockets = append(sockets, s)
				mu.Unlock()
			}
			return s, err
		}
		writes := func() (n uint64) {
			mu.Lock()
			defer mu.Unlock()
			for _, s := range sockets {
				n += s.Stats().Writes
			}
			return n
		}
		const n = 8
		var before uint64
		_, done := heldRequests(t, nw, cfg, n, func(held []*erpc.ReqHandle) {
			before = writes()
			for _, h := range held {
				echo(h)
			}
		})
		defer done()
		if got := writes() - before; got != 1 {
			t.Errorf("%d responses of one turn took %d writes, want 1", n, got)
		}
	})
}
