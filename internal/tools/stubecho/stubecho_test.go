package stubecho

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/internal/tools/tcpecho"
	"github.com/homa-go/homa/sock"
)

// server is what the tests need of either server.
type server interface {
	Served() int64
	Close()
}

// homaPair serves o over Homa on an in-memory network and returns the
// server and a client of it. Polling is off, so that the clock of a
// synctest bubble advances.
func homaPair(t *testing.T, o Options) (*HomaServer, *Client) {
	t.Helper()
	nw := memnet.New(memnet.Config{})
	host := netip.MustParseAddr("10.0.0.1")
	cfg := &sock.Config{PollDuration: -1, Network: nw}
	open := func(port uint16) *sock.Socket {
		s, err := sock.Open(netip.AddrPortFrom(host, port), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	srv := ServeHoma(open(4000), o)
	c := NewHomaClient(open(0), srv.Addr())
	t.Cleanup(func() {
		c.Close()
		srv.Close()
		nw.Close()
	})
	return srv, c
}

// tcpPair serves o with gRPC-go on loopback TCP and returns the server
// and a client of it.
func tcpPair(t *testing.T, o Options) (*TCPServer, *Client) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := ServeTCP(ln, o)
	c, err := DialTCP(srv.Addr().String())
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		srv.Close()
	})
	return srv, c
}

// checkEcho makes calls of several sizes, up to largest, and checks each
// reply against a server with reply size replySize, and the count of
// calls served.
func checkEcho(t *testing.T, srv server, c *Client, replySize, largest int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sizes := []int{0, 1, 32, 1500, 70_000, largest}
	for _, n := range sizes {
		req := make([]byte, n)
		for i := range req {
			req[i] = byte(i*7 + n)
		}
		got, err := c.Call(ctx, req)
		want := tcpecho.AppendReply(nil, req, replySize)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("call of %d bytes: %d bytes back, %v; want %d", n, len(got), err, len(want))
		}
	}
	if got := srv.Served(); got != int64(len(sizes)) {
		t.Errorf("served %d calls, want %d", got, len(sizes))
	}
}

func TestEchoHoma(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, c := homaPair(t, Options{})
		checkEcho(t, srv, c, 0, MaxHomaPayload)
	})
}

func TestEchoTCP(t *testing.T) {
	srv, c := tcpPair(t, Options{})
	checkEcho(t, srv, c, 0, 1_000_000)
}

// TestReplySize: replies are cut or zero-padded to the reply size, the
// same way over both transports.
func TestReplySize(t *testing.T) {
	t.Run("homa", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv, c := homaPair(t, Options{ReplySize: 100})
			checkEcho(t, srv, c, 100, 2000)
		})
	})
	t.Run("tcp", func(t *testing.T) {
		srv, c := tcpPair(t, Options{ReplySize: 100})
		checkEcho(t, srv, c, 100, 2000)
	})
}

// TestTooLarge: a payload beyond homagrpc's receive limit (grpc-go's
// 4 MiB) fails with the status homagrpc gives it, and the server goes
// on; one beyond a single Homa message goes through.
func TestTooLarge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, c := homaPair(t, Options{})
		ctx := context.Background()
		if got, err := c.Call(ctx, make([]byte, MaxHomaPayload+300)); err != nil || len(got) != MaxHomaPayload+300 {
			t.Errorf("call of more than one Homa message: %d bytes back, %v", len(got), err)
		}
		_, err := c.Call(ctx, make([]byte, MaxTCPMessage+300))
		if status.Code(err) != codes.ResourceExhausted {
			t.Errorf("oversized call: %v, want ResourceExhausted", err)
		}
		if got, err := c.Call(ctx, []byte("after")); err != nil || string(got) != "after" {
			t.Errorf("call after: %q, %v", got, err)
		}
		if srv.Served() != 2 {
			t.Errorf("served %d, want 2", srv.Served())
		}
	})
}

// TestOtherMethods: only UnaryCall is implemented.
func TestOtherMethods(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, c := homaPair(t, Options{})
		if _, err := c.stub.EmptyCall(context.Background(), &testpb.Empty{}); status.Code(err) != codes.Unimplemented {
			t.Errorf("EmptyCall: %v, want Unimplemented", err)
		}
	})
}

// TestClose: Close is idempotent on servers and clients, a closed
// client's calls fail, and inside the bubble no goroutine is left (the
// bubble would report it).
func TestClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, c := homaPair(t, Options{})
		if _, err := c.Call(context.Background(), []byte("x")); err != nil {
			t.Fatal(err)
		}
		c.Close()
		c.Close()
		if _, err := c.Call(context.Background(), []byte("x")); err == nil {
			t.Error("call on a closed client succeeded")
		}
		srv.Close()
		srv.Close()
	})
	srv, c := tcpPair(t, Options{})
	c.Close()
	srv.Close()
	srv.Close()
}

// TestStreamTCP: messages sent on a FullDuplexCall stream come back in
// order, and the stream closes cleanly.
func TestStreamTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := ServeTCP(ln, Options{})
	defer srv.Close()
	c, err := DialTCP(srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.Stream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		req := bytes.Repeat([]byte{byte(i)}, 1000+i)
		got, err := s.Exchange(req)
		if err != nil || !bytes.Equal(got, req) {
			t.Fatalf("message %d: %d bytes, %v", i, len(got), err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := srv.Served(); n != 50 {
		t.Errorf("server answered %d messages, want 50", n)
	}
}
