package erpc_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/sock/erpc"
)

// answerEcho answers every request h holds with its own data, whatever
// its size.
func (h *holder) answerEcho() {
	h.mu.Lock()
	held := h.held
	h.held = nil
	h.mu.Unlock()
	for _, r := range held {
		echo(r)
	}
}

// holderPair starts, on an in-memory network of the seed, a server whose
// request type 1 echoes and type 2 goes to h (its configuration changed
// by set, if not nil), and a client with a session to it; the test's
// cleanup closes them.
func holderPair(t *testing.T, seed uint64, set func(*erpc.Config), h *holder) (*server, *client, erpc.Session) {
	return holderPairOn(t, memnet.Config{Seed: seed}, set, h)
}

// holderPairOn is holderPair on a network configured by nc.
func holderPairOn(t *testing.T, nc memnet.Config, set func(*erpc.Config), h *holder) (*server, *client, erpc.Session) {
	nw := memnet.New(nc)
	scfg := memConfig(nw)
	if set != nil {
		set(scfg)
	}
	srv := newServer(t, scfg, serverHost, func(nx *erpc.Nexus) {
		_ = nx.Register(1, echo, erpc.Dispatch)
		_ = nx.Register(2, h.handle, erpc.Dispatch)
	}, nil)
	cli := newClient(t, memConfig(nw), clientHost)
	t.Cleanup(func() { cli.close(); srv.close(); nw.Close() })
	return srv, cli, cli.connect(t, serverHost)
}

// TestExactlyOnceLarge: an 8 MiB exactly-once request with an 8 MiB
// response runs once across everything that sends it again: its own
// retries while the handler runs (each a whole new attempt, fragments
// and all, parked at the server), a Call whose context ends, a new
// session and Resume while it still runs, and Resume after it ran (a
// duplicate of a completed request, answered from the record and
// pulled in fragments).
func TestExactlyOnceLarge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h holder
		srv, cli, s := holderPair(t, 80, nil, &h)
		req := pattern(8 << 20)

		// Three RetryTimeouts (100 ms) pass while the handler holds it.
		ctx, cancel := context.WithTimeout(context.Background(), 350*time.Millisecond)
		_, err := cli.rpc.Call(ctx, s, 2, req, erpc.ExactlyOnce)
		cancel()
		tk := erpc.TicketOf(err)
		if !errors.Is(err, context.DeadlineExceeded) || tk == nil {
			t.Fatalf("Call past its deadline: %v, want DeadlineExceeded with a ticket", err)
		}
		if st := srv.rpc.Stats(); h.count() != 1 || st.InProgressDups == 0 {
			t.Fatalf("handler holds %d requests, %d duplicates parked; want 1 and some", h.count(), st.InProgressDups)
		}
		if cli.rpc.Stats().Retries == 0 {
			t.Fatal("no attempt was sent again")
		}

		// A new session; resumed while the handler still runs.
		if err := cli.rpc.DestroySession(s); err != nil {
			t.Fatal(err)
		}
		cli.runUntil(t, time.Second, func() bool { e, _ := cli.rec.last(s); return e.ev == erpc.Disconnected })
		s = cli.connect(t, serverHost)
		ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err = cli.rpc.Call(ctx, s, 2, req, erpc.Resume(tk))
		cancel()
		next := erpc.TicketOf(err)
		if !errors.Is(err, context.DeadlineExceeded) || next == nil {
			t.Fatalf("resumed Call past its deadline: %v", err)
		}

		h.answerEcho() // the one run completes
		if st := srv.rpc.Stats(); st.RecordBytes < 8<<20 || st.LargeBytes != 0 {
			t.Fatalf("server after the run: %d record bytes (want the 8 MiB response), %d large bytes", st.RecordBytes, st.LargeBytes)
		}
		dups := srv.rpc.Stats().Duplicates
		resp, err := cli.rpc.Call(t.Context(), s, 2, req, erpc.Resume(next))
		if err != nil || !bytes.Equal(resp, req) {
			t.Fatalf("resumed after the run: %d bytes, %v", len(resp), err)
		}
		if n := h.runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
		if st := srv.rpc.Stats(); st.Duplicates == dups {
			t.Fatal("the resumed request was not answered from the record")
		}

		// The client acknowledges it (its next request carries the ack
		// floor), and the record lets the 8 MiB go.
		c := cli.enqueue(t, s, 2, []byte("next"), erpc.ExactlyOnce)
		cli.runUntil(t, time.Second, func() bool { h.answerEcho(); return c.done })
		if c.err != nil || string(c.data) != "next" {
			t.Fatalf("next request: %q %v", c.data, c.err)
		}
		cli.runUntil(t, time.Second, func() bool { return srv.rpc.Stats().RecordBytes < 1<<20 })
	})
}

// TestLargeWindow: with FragmentWindow w, a large request keeps w
// fragments in flight and a large response w pulls, never more; on a
// network that reorders and delays packets the fragments reach the
// server out of order and are put in their place, for requests that are
// exactly-once or not. It logs the virtual time each 8 MiB echo took
// (10 Gbit/s links, 50-250 µs one way), a figure the machine's load does
// not change (go test -v -run TestLargeWindow).
func TestLargeWindow(t *testing.T) {
	for _, w := range []int{1, 3, 4} {
		synctest.Test(t, func(t *testing.T) {
			nw := memnet.New(memnet.Config{Seed: 81, Reorder: 0.2, Delay: 50 * time.Microsecond, Jitter: 200 * time.Microsecond, LinkMbps: 10_000})
			defer nw.Close()
			srv := newServer(t, memConfig(nw), serverHost, func(nx *erpc.Nexus) {
				_ = nx.Register(1, echo, erpc.Dispatch)
			}, nil)
			defer srv.close()
			ccfg := memConfig(nw)
			ccfg.FragmentWindow = w
			cli := newClient(t, ccfg, clientHost)
			defer cli.close()
			s := cli.connect(t, serverHost)
			for _, opts := range [][]erpc.ReqOption{nil, {erpc.ExactlyOnce}} {
				req := pattern(8 << 20)
				start := time.Now()
				c := cli.enqueue(t, s, 1, req, opts...)
				cli.runUntil(t, 10*time.Second, allDone([]*call{c}))
				if c.err != nil || !bytes.Equal(c.data, req) {
					t.Fatalf("window %d: %d bytes, %v", w, len(c.data), c.err)
				}
				t.Logf("window %d, exactly-once %v: 8 MiB echo in %v of virtual time", w, opts != nil, time.Since(start))
			}
			if p := erpc.FragPeak(cli.rpc); p != w {
				t.Fatalf("window %d: %d in flight at most", w, p)
			}
			ooo := erpc.OutOfOrder(srv.rpc)
			if w == 1 && ooo != 0 || w > 1 && ooo == 0 {
				t.Fatalf("window %d: %d fragments arrived ahead of one missing", w, ooo)
			}
			if st := srv.rpc.Stats(); st.LargeRefused != 0 || st.LargeBytes != 0 {
				t.Fatalf("window %d: server %+v", w, st)
			}
		})
	}
}

// TestExactlyOnceLargeNotKept: a large exactly-once response that does
// not fit in what MaxRecordBytes leaves is counted before it is copied,
// not kept, and still delivered (pulled from the large messages); a copy
// of its request then learns that it ran (ErrResponseLost) and does not
// run it again.
func TestExactlyOnceLargeNotKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h holder
		srv, cli, s := holderPair(t, 82, func(c *erpc.Config) { c.ExactlyOnce.MaxRecordBytes = 2 << 20 }, &h)
		req := pattern(3 << 20)

		resp, err := cli.rpc.Call(t.Context(), s, 1, req, erpc.ExactlyOnce)
		if err != nil || !bytes.Equal(resp, req) {
			t.Fatalf("3 MiB over a 2 MiB record budget: %d bytes, %v", len(resp), err)
		}
		if st := srv.rpc.Stats(); st.ResponsesLost != 1 || st.RecordBytes > 1<<10 || st.LargeBytes != 0 {
			t.Fatalf("server: %d lost, %d record bytes, %d large bytes", st.ResponsesLost, st.RecordBytes, st.LargeBytes)
		}

		// Held by its handler, given up, answered, resumed.
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err = cli.rpc.Call(ctx, s, 2, req, erpc.ExactlyOnce)
		cancel()
		tk := erpc.TicketOf(err)
		if tk == nil {
			t.Fatalf("Call past its deadline: %v, want a ticket", err)
		}
		h.answerEcho()
		if _, err := cli.rpc.Call(t.Context(), s, 2, req, erpc.Resume(tk)); !errors.Is(err, erpc.ErrResponseLost) {
			t.Fatalf("resumed: %v, want ErrResponseLost", err)
		}
		if n := h.runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
	})
}

// TestExactlyOnceLargeCut: the network fails while an 8 MiB exactly-once
// response is being pulled; the request fails with a ticket, and resumed
// once the network is back, on a new session, it gets the response of
// its one run, pulled again from the record.
func TestExactlyOnceLargeCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var cut atomic.Bool
		var h holder
		srv, cli, s := holderPairOn(t, memnet.Config{Seed: 83, LinkMbps: 1000, Drop: func(src, dst netip.Addr, _ []byte) bool {
			return cut.Load()
		}}, nil, &h)
		req := pattern(8 << 20)
		c := cli.enqueue(t, s, 1, req, erpc.ExactlyOnce)
		cli.runUntil(t, 5*time.Second, func() bool { return srv.rpc.Stats().ResponsesSent == 1 })
		cut.Store(true) // the response's pulls have just begun
		cli.runUntil(t, 30*time.Second, allDone([]*call{c}))
		tk := erpc.TicketOf(c.err)
		if tk == nil || len(c.data) != 0 {
			t.Fatalf("cut off: %d bytes, %v; want a failure with a ticket", len(c.data), c.err)
		}
		t.Logf("cut off: %v (client sent %d, server sent %d)", c.err, cli.rpc.Stats().RequestsSent, srv.rpc.Stats().ResponsesSent)
		cut.Store(false)
		if err := cli.rpc.DestroySession(s); err != nil {
			t.Fatal(err)
		}
		cli.runUntil(t, 5*time.Second, func() bool { e, _ := cli.rec.last(s); return e.ev == erpc.Disconnected })
		s = cli.connect(t, serverHost)
		resp, err := cli.rpc.Call(t.Context(), s, 1, req, erpc.Resume(tk))
		if err != nil || !bytes.Equal(resp, req) {
			t.Fatalf("resumed: %d bytes, %v", len(resp), err)
		}
		if st := srv.rpc.Stats(); st.RequestsServed != 1 || st.Duplicates == 0 {
			t.Fatalf("server: %d runs, %d duplicates; want 1 run, answered from the record", st.RequestsServed, st.Duplicates)
		}
	})
}
