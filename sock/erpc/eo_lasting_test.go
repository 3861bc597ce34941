package erpc_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/internal/testkit/socktest"
	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/erpc"
)

// TestExactlyOnce4096InFlight: with the default limits a server Rpc takes
// 4,096 exactly-once requests in progress at once (16 sessions of 256):
// a record in progress reserves what a small response needs, not the
// largest response.
func TestExactlyOnce4096InFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 60})
		defer nw.Close()
		var h holder
		// The transport holds at most 2,000 requests of one client host
		// unanswered by default; that limit is the transport's.
		scfg := &erpc.Config{Open: func(a netip.AddrPort) (*sock.Socket, error) {
			sc := testConfig()
			sc.Limits.IncomingRPCsPerPeer, sc.Limits.PendingRepliesPerPeer = 5000, 5000
			return socktest.OpenMem(nw, a, sc)
		}}
		srv := newServer(t, scfg, serverHost, func(nx *erpc.Nexus) {
			_ = nx.Register(1, h.handle, erpc.Dispatch)
		}, nil)
		defer srv.close()
		ccfg := memConfig(nw)
		ccfg.SessionWindow = 256
		cli := newClient(t, ccfg, clientHost)
		defer cli.close()
		var calls []*call
		for range 16 {
			s := cli.connect(t, serverHost)
			for range 256 {
				calls = append(calls, cli.enqueue(t, s, 1, []byte("x"), erpc.ExactlyOnce))
			}
		}
		cli.runUntil(t, 5*time.Second, func() bool { return h.count() == 4096 })
		if st := srv.rpc.Stats(); st.RecordsFull != 0 || st.Records != 4096 {
			t.Fatalf("server: %d records, %d refused", st.Records, st.RecordsFull)
		}
		h.answer(t)
		cli.runUntil(t, 5*time.Second, allDone(calls))
		for _, c := range calls {
			if c.err != nil || string(c.data) != "x" {
				t.Fatalf("request: %q %v", c.data, c.err)
			}
		}
	})
}

// TestExactlyOnceLargeResponse: a 200,000-byte exactly-once response comes
// back with the defaults; one larger than MaxResponse fails with an error
// that names that limit; one that does not fit in the room left for
// records is still delivered, and a copy of its request learns that it
// ran rather than running it again.
func TestExactlyOnceLargeResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 61})
		defer nw.Close()
		big := bytes.Repeat([]byte("0123456789"), 20_000)
		var runs int
		register := func(nx *erpc.Nexus) {
			_ = nx.Register(1, func(h *erpc.ReqHandle) {
				runs++
				r := h.Rpc()
				b, _ := r.AllocMsgBuffer(len(big))
				copy(b.Data(), big)
				_ = r.EnqueueResponse(h, b)
				r.FreeMsgBuffer(b)
			}, erpc.Dispatch)
		}
		for _, tc := range []struct {
			name    string
			eo      erpc.ExactlyOnceConfig
			wantErr error
			lost    uint64
		}{
			{"defaults", erpc.ExactlyOnceConfig{}, nil, 0},
			{"over MaxResponse", erpc.ExactlyOnceConfig{MaxResponse: 100_000}, erpc.ErrMessageTooLarge, 0},
			{"over MaxRecordBytes", erpc.ExactlyOnceConfig{MaxRecordBytes: 100_000}, nil, 1},
		} {
			scfg := memConfig(nw)
			scfg.ExactlyOnce = tc.eo
			srv := newServer(t, scfg, serverHost, register, nil)
			cli := newClient(t, memConfig(nw), clientHost)
			s := cli.connect(t, serverHost)
			runs = 0
			c := cli.enqueue(t, s, 1, []byte("big"), erpc.ExactlyOnce)
			cli.runUntil(t, time.Second, allDone([]*call{c}))
			switch {
			case tc.wantErr == nil && (c.err != nil || !bytes.Equal(c.data, big)):
				t.Fatalf("%s: %d bytes, %v", tc.name, len(c.data), c.err)
			case tc.wantErr != nil && !errors.Is(c.err, tc.wantErr):
				t.Fatalf("%s: %v, want %v", tc.name, c.err, tc.wantErr)
			case c.err != nil && (strings.Contains(c.err.Error(), "1..1000000") || !strings.Contains(c.err.Error(), "MaxResponse")):
				t.Fatalf("%s: error %q should name MaxResponse", tc.name, c.err)
			}
			if st := srv.rpc.Stats(); st.ResponsesLost != tc.lost || runs != 1 {
				t.Fatalf("%s: %d responses lost, handler ran %d times", tc.name, st.ResponsesLost, runs)
			}
			cli.close()
			srv.close()
		}
	})
}

// TestExactlyOnceResume: a Call whose context ends while the handler
// runs fails with an *IncompleteError carrying a ticket; resumed after a
// reconnect (a new session), and again after its context ended, the
// request gets the response of its one run.
func TestExactlyOnceResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 62})
		defer nw.Close()
		var h holder
		srv := newServer(t, memConfig(nw), serverHost, func(nx *erpc.Nexus) {
			_ = nx.Register(1, h.handle, erpc.Dispatch)
		}, nil)
		defer srv.close()
		cli := newClient(t, memConfig(nw), clientHost)
		defer cli.close()
		s := cli.connect(t, serverHost)

		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err := cli.rpc.Call(ctx, s, 1, []byte("pay once"), erpc.ExactlyOnce)
		cancel()
		tk := erpc.TicketOf(err)
		if !errors.Is(err, context.DeadlineExceeded) || tk == nil {
			t.Fatalf("Call past its deadline: %v, want DeadlineExceeded with a ticket", err)
		}
		if h.count() != 1 {
			t.Fatalf("handler holds %d requests, want 1", h.count())
		}

		// A new session: the ticket still names the request.
		if err := cli.rpc.DestroySession(s); err != nil {
			t.Fatal(err)
		}
		cli.runUntil(t, time.Second, func() bool { e, _ := cli.rec.last(s); return e.ev == erpc.Disconnected })
		s = cli.connect(t, serverHost)

		// Resumed while the handler still runs: parked, the context ends
		// again, and another ticket comes back.
		ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err = cli.rpc.Call(ctx, s, 1, []byte("pay once"), erpc.Resume(tk))
		cancel()
		next := erpc.TicketOf(err)
		if !errors.Is(err, context.DeadlineExceeded) || next == nil {
			t.Fatalf("resumed Call past its deadline: %v", err)
		}
		if _, err := cli.rpc.Call(context.Background(), s, 1, nil, erpc.Resume(tk)); !errors.Is(err, erpc.ErrTicket) {
			t.Fatalf("a used ticket: %v, want ErrTicket", err)
		}
		if n := srv.rpc.Stats().InProgressDups; n == 0 {
			t.Fatal("the resumed request did not reach the server as a duplicate")
		}

		h.answer(t) // the one run completes
		ctx, cancel = context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := cli.rpc.Call(ctx, s, 1, []byte("pay once"), erpc.Resume(next))
		if err != nil || string(resp) != "pay once" {
			t.Fatalf("resumed after the run: %q %v", resp, err)
		}
		if n := h.runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
	})
}

// TestExactlyOnceTicketsBounded: a request whose attempts run out fails
// with ErrTimeout and a ticket; a stream keeps at most MaxTickets, the
// oldest going first; a released or dropped ticket cannot be resumed.
func TestExactlyOnceTicketsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 63})
		defer nw.Close()
		var h holder
		srv := newServer(t, memConfig(nw), serverHost, func(nx *erpc.Nexus) {
			_ = nx.Register(1, h.handle, erpc.Dispatch)
		}, nil)
		defer srv.close()
		ccfg := memConfig(nw)
		ccfg.ExactlyOnce.MaxRetries = 2
		ccfg.ExactlyOnce.MaxTickets = 1
		cli := newClient(t, ccfg, clientHost)
		defer cli.close()
		s := cli.connect(t, serverHost)

		a := cli.enqueue(t, s, 1, []byte("a"), erpc.ExactlyOnce)
		b := cli.enqueue(t, s, 1, []byte("b"), erpc.ExactlyOnce)
		cli.runUntil(t, time.Second, allDone([]*call{a, b}))
		for _, c := range []*call{a, b} {
			if !errors.Is(c.err, erpc.ErrTimeout) {
				t.Fatalf("request: %v, want ErrTimeout", c.err)
			}
		}
		ta, tb := erpc.TicketOf(a.err), erpc.TicketOf(b.err)
		if ta == nil || tb == nil {
			t.Fatalf("tickets %v %v", ta, tb)
		}
		if n := cli.rpc.Stats().TicketsDropped; n != 1 {
			t.Fatalf("TicketsDropped = %d, want 1", n)
		}
		if _, err := cli.rpc.Call(t.Context(), s, 1, []byte("a"), erpc.Resume(ta)); !errors.Is(err, erpc.ErrTicket) {
			t.Fatalf("resume of the dropped ticket: %v, want ErrTicket", err)
		}
		h.answer(t)
		resp, err := cli.rpc.Call(t.Context(), s, 1, []byte("b"), erpc.Resume(tb))
		if err != nil || string(resp) != "b" {
			t.Fatalf("resume: %q %v", resp, err)
		}
		if n := h.runs.Load(); n != 2 {
			t.Fatalf("handler ran %d times, want 2 (once each)", n)
		}
		cli.rpc.ReleaseTicket(tb) // used already: ignored

		// A ticket not resumed within TicketTimeout (30 s) is released.
		c := cli.enqueue(t, s, 1, []byte("c"), erpc.ExactlyOnce)
		cli.runUntil(t, time.Second, allDone([]*call{c}))
		tc := erpc.TicketOf(c.err)
		if tc == nil {
			t.Fatalf("third request: %v, want a ticket", c.err)
		}
		cli.runUntil(t, 31*time.Second, func() bool { return cli.rpc.Stats().TicketsDropped == 2 })
		if _, err := cli.rpc.Call(t.Context(), s, 1, []byte("c"), erpc.Resume(tc)); !errors.Is(err, erpc.ErrTicket) {
			t.Fatalf("resume of an expired ticket: %v, want ErrTicket", err)
		}
		h.answer(t)
	})
}
