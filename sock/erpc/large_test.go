package erpc_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/sock/erpc"
)

// pattern returns n bytes that differ at every offset modulo 251, so a
// fragment put in the wrong place shows.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}

// TestLargeMessages: requests and responses beyond one Homa message, up
// to the default MaxMessage of 8 MiB, go through whole and in order, to
// dispatch and background handlers, and leave nothing held at the server.
func TestLargeMessages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 70})
		defer nw.Close()
		scfg := memConfig(nw)
		scfg.BackgroundThreads = 1
		// Type 1 echoes; type 2 answers with as many bytes as the request
		// says (in its length), from a background worker.
		srv := newServer(t, scfg, serverHost, func(nx *erpc.Nexus) {
			_ = nx.Register(1, echo, erpc.Dispatch)
			_ = nx.Register(2, func(h *erpc.ReqHandle) {
				r := h.Rpc()
				b, err := r.AllocMsgBuffer(len(h.Request()) * 1000)
				if err != nil {
					_ = respond(h, []byte(err.Error()))
					return
				}
				copy(b.Data(), pattern(b.Len()))
				_ = r.EnqueueResponse(h, b)
				r.FreeMsgBuffer(b)
			}, erpc.Background)
		}, nil)
		defer srv.close()
		cli := newClient(t, memConfig(nw), clientHost)
		defer cli.close()
		s := cli.connect(t, serverHost)

		for _, tc := range []struct {
			name    string
			reqType uint8
			req     []byte
			want    []byte
		}{
			{"8 MiB echo", 1, pattern(8 << 20), pattern(8 << 20)},
			{"3 MB request, echo", 1, pattern(3_000_001), pattern(3_000_001)},
			{"small request, 2.5 MB response", 2, make([]byte, 2500), pattern(2_500_000)},
			{"one byte over one message", 1, pattern(erpc.MaxMsgSize + 1), pattern(erpc.MaxMsgSize + 1)},
		} {
			c := cli.enqueue(t, s, tc.reqType, tc.req)
			cli.runUntil(t, 10*time.Second, allDone([]*call{c}))
			if c.err != nil || !bytes.Equal(c.data, tc.want) {
				t.Fatalf("%s: %d bytes, %v", tc.name, len(c.data), c.err)
			}
		}
		if st := srv.rpc.Stats(); st.LargeBytes != 0 || st.LargeRefused != 0 {
			t.Fatalf("server after the large messages: %+v", st)
		}
		// Call carries them too.
		resp, err := cli.rpc.Call(t.Context(), s, 1, pattern(4<<20))
		if err != nil || !bytes.Equal(resp, pattern(4<<20)) {
			t.Fatalf("Call: %d bytes, %v", len(resp), err)
		}
		// Exactly-once requests and responses are as large as the others.
		resp, err = cli.rpc.Call(t.Context(), s, 1, pattern(8<<20), erpc.ExactlyOnce)
		if err != nil || !bytes.Equal(resp, pattern(8<<20)) {
			t.Fatalf("8 MiB exactly-once echo: %d bytes, %v", len(resp), err)
		}
	})
}

// TestLargeMessageLimit: MaxMessage is configurable, and each end holds
// the other to its own: a server refuses a request above it, a client a
// response above it, before taking more than one fragment.
func TestLargeMessageLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 71})
		defer nw.Close()
		scfg := memConfig(nw)
		scfg.MaxMessage = 2 << 20
		srv := newServer(t, scfg, serverHost, func(nx *erpc.Nexus) {
			_ = nx.Register(1, echo, erpc.Dispatch)
		}, nil)
		defer srv.close()
		ccfg := memConfig(nw)
		ccfg.MaxMessage = 16 << 20
		cli := newClient(t, ccfg, clientHost)
		defer cli.close()
		s := cli.connect(t, serverHost)

		c := cli.enqueue(t, s, 1, pattern(3<<20))
		cli.runUntil(t, 5*time.Second, allDone([]*call{c}))
		if !errors.Is(c.err, erpc.ErrMessageTooLarge) {
			t.Fatalf("3 MiB request to a 2 MiB server: %v, want ErrMessageTooLarge", c.err)
		}
		// Each fragment of the window that reached the server is refused.
		if st := srv.rpc.Stats(); st.LargeBytes != 0 || st.LargeRefused < 1 || st.LargeRefused > 4 || st.RequestsServed != 0 {
			t.Fatalf("server: %+v", st)
		}
		if _, err := srv.rpc.AllocMsgBuffer(2<<20 + 1); !errors.Is(err, erpc.ErrMessageTooLarge) {
			t.Fatalf("buffer above MaxMessage: %v", err)
		}

		// A client with a 2 MiB limit does not take a 3 MiB response; the
		// server drops it MessageTimeout (2 s) later.
		small := memConfig(nw)
		small.MaxMessage = 2 << 20
		srv2 := newServer(t, memConfig(nw), otherHost, func(nx *erpc.Nexus) {
			_ = nx.Register(1, echo, erpc.Dispatch)
			_ = nx.Register(2, respondBig(3<<20), erpc.Dispatch)
		}, nil)
		defer srv2.close()
		cli2 := newClient(t, small, netip.MustParseAddr("10.0.0.4"))
		defer cli2.close()
		s2 := cli2.connect(t, otherHost)
		c = cli2.enqueue(t, s2, 1, pattern(2<<20)) // echoed: fits both ends
		cli2.runUntil(t, 5*time.Second, allDone([]*call{c}))
		if c.err != nil || len(c.data) != 2<<20 {
			t.Fatalf("2 MiB echo: %d bytes, %v", len(c.data), c.err)
		}
		c = cli2.enqueue(t, s2, 2, []byte("big one"))
		cli2.runUntil(t, 5*time.Second, allDone([]*call{c}))
		if !errors.Is(c.err, erpc.ErrMessageTooLarge) {
			t.Fatalf("3 MiB response to a 2 MiB client: %v, want ErrMessageTooLarge", c.err)
		}
		if st := srv2.rpc.Stats(); st.LargeBytes != 3<<20 {
			t.Fatalf("server holds %d bytes of the response, want 3 MiB", st.LargeBytes)
		}
		time.Sleep(2100 * time.Millisecond)
		if st := srv2.rpc.Stats(); st.LargeBytes != 0 || st.LargeExpired != 1 {
			t.Fatalf("after MessageTimeout: %+v", st)
		}
	})
}

// respondBig is a handler that answers every request with n zero bytes.
func respondBig(n int) erpc.Handler {
	return func(h *erpc.ReqHandle) {
		b, _ := h.Rpc().AllocMsgBuffer(n)
		_ = h.Rpc().EnqueueResponse(h, b)
		h.Rpc().FreeMsgBuffer(b)
	}
}

// TestLargeResponseGone: a large response the server dropped (its
// MessageTimeout passed) before the client pulled the rest is reported
// as gone, not as a protocol error: a pull's answer carries no request
// type, since the server that lost the response knows none.
func TestLargeResponseGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 71, Delay: 5 * time.Millisecond})
		defer nw.Close()
		scfg := memConfig(nw)
		scfg.MessageTimeout = time.Millisecond
		srv := newServer(t, scfg, serverHost, func(nx *erpc.Nexus) {
			_ = nx.Register(7, respondBig(3<<20), erpc.Dispatch)
		}, nil)
		defer srv.close()
		cli := newClient(t, memConfig(nw), clientHost)
		defer cli.close()
		s := cli.connect(t, serverHost)
		c := cli.enqueue(t, s, 7, []byte("big one"))
		cli.runUntil(t, 5*time.Second, allDone([]*call{c}))
		if c.err == nil || errors.Is(c.err, erpc.ErrProtocol) {
			t.Fatalf("pulling a response the server dropped: %v, want the response reported gone", c.err)
		}
		t.Logf("%v", c.err)
	})
}
