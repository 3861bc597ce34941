package erpc_test

import (
	"bytes"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/sock/erpc"
)

// TestNestedFromBackground: a background handler, on a worker goroutine,
// issues a nested request through Submit and answers from its
// continuation. Run with -race: the worker never touches the Rpc's
// owner-only state.
func TestNestedFromBackground(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 40})
		defer nw.Close()
		back := newServer(t, memConfig(nw), otherHost, func(nx *erpc.Nexus) {
			_ = nx.Register(2, func(h *erpc.ReqHandle) {
				_ = respond(h, bytes.ToUpper(h.Request()))
			}, erpc.Dispatch)
		}, nil)
		defer back.close()

		var toBack erpc.Session
		fcfg := memConfig(nw)
		fcfg.BackgroundThreads = 2
		front := newServer(t, fcfg, serverHost, func(nx *erpc.Nexus) {
			_ = nx.Register(1, func(h *erpc.ReqHandle) {
				r := h.Rpc()
				req, _ := r.AllocMsgBuffer(len(h.Request()))
				copy(req.Data(), h.Request())
				resp, _ := r.AllocMsgBuffer(0)
				cont := func(resp *erpc.MsgBuffer, tag any, err error) {
					h := tag.(*erpc.ReqHandle)
					if err != nil {
						_ = respond(h, []byte(err.Error()))
					} else {
						_ = respond(h, append(resp.Data(), '!'))
					}
					r.FreeMsgBuffer(req)
					r.FreeMsgBuffer(resp)
				}
				err := r.Submit(func() {
					if err := r.EnqueueRequest(toBack, 2, req, resp, cont, h); err != nil {
						_ = respond(h, []byte(err.Error()))
					}
				})
				if err != nil {
					_ = respond(h, []byte(err.Error()))
				}
			}, erpc.Background)
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
		var calls []*call
		for i := range 20 {
			calls = append(calls, cli.enqueue(t, s, 1, []byte{'a' + byte(i)}))
		}
		cli.runUntil(t, 2*time.Second, allDone(calls))
		for i, c := range calls {
			want := string([]byte{'A' + byte(i), '!'})
			if c.err != nil || string(c.data) != want {
				t.Fatalf("call %d: %q %v, want %q", i, c.data, c.err, want)
			}
		}
		if st := front.rpc.Stats(); st.NotOwner != 0 {
			t.Fatalf("NotOwner = %d, want 0", st.NotOwner)
		}
	})
}

// TestSubmitWakesLoop: a function submitted from another goroutine runs
// in the owner's loop, which was waiting for messages; submissions run in
// order; a full queue refuses with a retryable error; a closed Rpc
// refuses with ErrClosed.
func TestSubmitWakesLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 41})
		defer nw.Close()
		cfg := memConfig(nw)
		cfg.SubmitQueue = 3
		srv := newServer(t, cfg, serverHost, nil, nil)
		synctest.Wait() // the loop waits in Recv
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Add(1)
			if err := srv.rpc.Submit(func() {
				defer wg.Done()
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
			}); err != nil {
				t.Fatal(err)
			}
		}
		wg.Wait() // the loop woke and ran them
		if len(order) != 3 || order[0] != 0 || order[1] != 1 || order[2] != 2 {
			t.Fatalf("ran %v, want [0 1 2]", order)
		}

		// With the loop stopped, the queue fills.
		srv.stop()
		for range 3 {
			if err := srv.rpc.Submit(func() {}); err != nil {
				t.Fatal(err)
			}
		}
		err := srv.rpc.Submit(func() {})
		if !errors.Is(err, erpc.ErrQueueFull) || !errors.Is(err, erpc.ErrRetryable) {
			t.Fatalf("Submit to a full queue: %v, want ErrQueueFull", err)
		}
		if n := srv.rpc.Stats().SubmitFull; n != 1 {
			t.Fatalf("SubmitFull = %d, want 1", n)
		}
		var ran atomic.Int32
		srv.rpc.Close()
		if err := srv.rpc.Submit(func() { ran.Add(1) }); !errors.Is(err, erpc.ErrClosed) {
			t.Fatalf("Submit after Close: %v, want ErrClosed", err)
		}
		srv.nx.Close()
	})
}

// TestNotOwner: owner-only methods called from a second goroutine while
// the owner's loop runs are refused with ErrNotOwner (or panic, for those
// without an error), and the loop goes on unharmed.
func TestNotOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 42})
		defer nw.Close()
		srv := newServer(t, memConfig(nw), serverHost, func(nx *erpc.Nexus) {
			_ = nx.Register(1, echo, erpc.Dispatch)
		}, nil)
		defer srv.close()
		synctest.Wait() // the server's loop waits in Recv

		r := srv.rpc
		_, err := r.CreateSession(netip.AddrPortFrom(otherHost, nexusPort), 0)
		var oe *erpc.OwnerError
		if !errors.As(err, &oe) || oe.Op != "CreateSession" || !errors.Is(err, erpc.ErrNotOwner) {
			t.Fatalf("CreateSession from a second goroutine: %v, want an OwnerError", err)
		}
		buf := mustBuf(t, r, 1)
		resp := mustBuf(t, r, 0)
		cont := func(*erpc.MsgBuffer, any, error) { t.Error("continuation of a refused request") }
		if err := r.EnqueueRequest(erpc.Session{}, 1, buf, resp, cont, nil); !errors.Is(err, erpc.ErrNotOwner) {
			t.Fatalf("EnqueueRequest: %v, want ErrNotOwner", err)
		}
		if _, err := r.Call(t.Context(), erpc.Session{}, 1, nil); !errors.Is(err, erpc.ErrNotOwner) {
			t.Fatalf("Call: %v, want ErrNotOwner", err)
		}
		if err := r.RunEventLoop(time.Millisecond); !errors.Is(err, erpc.ErrNotOwner) {
			t.Fatalf("RunEventLoop: %v, want ErrNotOwner", err)
		}
		mustPanic(t, "IsConnected from a second goroutine", func() { r.IsConnected(erpc.Session{}) })
		if n := r.Stats().NotOwner; n != 5 {
			t.Fatalf("NotOwner = %d, want 5", n)
		}
		r.FreeMsgBuffer(buf)
		r.FreeMsgBuffer(resp)

		// The server still serves.
		cli := newClient(t, memConfig(nw), clientHost)
		defer cli.close()
		s := cli.connect(t, serverHost)
		c := cli.enqueue(t, s, 1, []byte("still"))
		cli.runUntil(t, time.Second, allDone([]*call{c}))
		if c.err != nil || string(c.data) != "still" {
			t.Fatalf("request after the misuse: %q %v", c.data, c.err)
		}
	})
}
