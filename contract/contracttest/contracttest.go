// Package contracttest checks that a Homa backend keeps the socket
// contract: the errors each call returns, in the same form, so that a
// program over package sock sees the same behaviour from the user-space
// engine and from the kernel module. Each backend's tests run Errors on
// sockets of their own (the engine on an in-memory network, the kernel
// backend on its model of the module).
package contracttest

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/homa-go/homa/contract"
)

// Socket is one backend's socket, in the shape of package sock's.
type Socket interface {
	LocalAddr() netip.AddrPort
	Send(dst netip.AddrPort, data []byte, cookie uint64) (uint64, error)
	Recv(ctx context.Context, id uint64) (*contract.Message, error)
	Reply(peer netip.AddrPort, id uint64, data []byte) error
	Abort(id uint64) error
	Close() error
}

// Opener opens a socket of the backend under test: a server socket on
// port (1..contract.MaxServerPort) that receives requests, or a client
// socket for port 0. Sockets opened by one Opener reach each other; the
// test closes them.
type Opener func(t *testing.T, port uint16) Socket

// wait bounds every wait of the checks below: a backend that never
// answers fails the test instead of hanging it.
const wait = 10 * time.Second

// Errors runs the contract's error cases against the backend of open.
func Errors(t *testing.T, open Opener) {
	t.Run("RecvUnknownRPC", func(t *testing.T) {
		c := open(t, 0)
		defer c.Close()
		_, err := c.Recv(context.Background(), 1234)
		wantOp(t, err, "recv", 1234, contract.ErrUnknownRPC)
	})
	t.Run("AbortUnknownRPC", func(t *testing.T) {
		c := open(t, 0)
		defer c.Close()
		if err := c.Abort(1234); !errors.Is(err, contract.ErrUnknownRPC) {
			t.Fatalf("Abort of an unknown id: %v, want ErrUnknownRPC", err)
		}
	})
	t.Run("MessageLength", func(t *testing.T) {
		s, c := pair(t, open)
		for _, n := range []int{0, contract.MaxMessage + 1} {
			if _, err := c.Send(s.LocalAddr(), make([]byte, n), 0); !errors.Is(err, contract.ErrMessageTooLong) {
				t.Errorf("Send of %d bytes: %v, want ErrMessageTooLong", n, err)
			}
		}
	})
	t.Run("BadAddress", func(t *testing.T) {
		c := open(t, 0)
		defer c.Close()
		dst := netip.AddrPortFrom(c.LocalAddr().Addr(), 0)
		if _, err := c.Send(dst, []byte("x"), 0); !errors.Is(err, contract.ErrBadAddress) {
			t.Fatalf("Send to port 0: %v, want ErrBadAddress", err)
		}
	})
	t.Run("RecvCancelled", func(t *testing.T) {
		c := open(t, 0)
		defer c.Close()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := c.Recv(ctx, 0); err != context.Canceled {
			t.Fatalf("Recv with a cancelled context: %v, want context.Canceled itself", err)
		}
	})
	t.Run("AbortWhileWaiting", func(t *testing.T) {
		s, c := pair(t, open)
		id, err := c.Send(s.LocalAddr(), []byte("never answered"), 7)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := recv(s, 0); err != nil { // the server holds the request
			t.Fatal(err)
		}
		got := waiter(c, id)
		waitRegistered(t, c, id)
		if err := c.Abort(id); err != nil {
			t.Fatal(err)
		}
		r := <-got
		if r.err != nil {
			t.Fatalf("Recv of an aborted RPC: %v, want its failure as a Message", r.err)
		}
		if m := r.m; m.ID != id || m.Cookie != 7 || m.Data != nil {
			t.Errorf("failure message: id %d cookie %d data %q, want id %d cookie 7 no data", m.ID, m.Cookie, m.Data, id)
		}
		wantOp(t, r.m.Err, "abort", id, contract.ErrAborted)
		// The failure was the RPC's last word.
		_, err = c.Recv(context.Background(), id)
		wantOp(t, err, "recv", id, contract.ErrUnknownRPC)
	})
	t.Run("AlreadyReplied", func(t *testing.T) {
		s, c := pair(t, open)
		id, err := c.Send(s.LocalAddr(), []byte("ping"), 0)
		if err != nil {
			t.Fatal(err)
		}
		req, err := recv(s, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Reply(req.Peer, req.ID, []byte("pong")); err != nil {
			t.Fatal(err)
		}
		if err := s.Reply(req.Peer, req.ID, []byte("pong")); !errors.Is(err, contract.ErrAlreadyReplied) && !errors.Is(err, contract.ErrUnknownRPC) {
			t.Errorf("second Reply: %v, want ErrAlreadyReplied (or ErrUnknownRPC once the RPC is gone)", err)
		}
		resp, err := recv(c, id)
		if err != nil || string(resp.Data) != "pong" {
			t.Fatalf("response: %v, %v", resp, err)
		}
	})
	t.Run("AlreadyWaiting", func(t *testing.T) {
		s, c := pair(t, open)
		id, err := c.Send(s.LocalAddr(), []byte("slow"), 0)
		if err != nil {
			t.Fatal(err)
		}
		got := waiter(c, id)
		waitRegistered(t, c, id)
		req, err := recv(s, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Reply(req.Peer, req.ID, []byte("done")); err != nil {
			t.Fatal(err)
		}
		if r := <-got; r.err != nil || string(r.m.Data) != "done" {
			t.Fatalf("the first waiter got %v, %v, want the response", r.m, r.err)
		}
	})
	t.Run("Closed", func(t *testing.T) {
		c := open(t, 0)
		blocked := make(chan error, 1)
		var started sync.WaitGroup
		started.Add(1)
		go func() {
			started.Done()
			_, err := c.Recv(context.Background(), 0)
			blocked <- err
		}()
		started.Wait()
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-blocked:
			wantClosed(t, "Recv blocked at Close", err)
		case <-time.After(wait):
			t.Fatal("Close did not end a blocked Recv")
		}
		_, err := c.Recv(context.Background(), 0)
		wantClosed(t, "Recv after Close", err)
		_, err = c.Send(netip.AddrPortFrom(c.LocalAddr().Addr(), 99), []byte("x"), 0)
		wantClosed(t, "Send after Close", err)
		if err := c.Close(); err != nil {
			t.Errorf("second Close: %v, want nil", err)
		}
	})
}

// result is what a Recv returned.
type result struct {
	m   *contract.Message
	err error
}

// waiter starts a goroutine waiting in Recv for id (again, if another
// Recv held the id as it came) and returns where its result will be.
func waiter(s Socket, id uint64) <-chan result {
	got := make(chan result, 1)
	go func() {
		for {
			m, err := recv(s, id)
			if !errors.Is(err, contract.ErrAlreadyWaiting) {
				got <- result{m, err}
				return
			}
		}
	}()
	return got
}

// waitRegistered returns once a goroutine waits in Recv for id: a second
// Recv for the id then fails at once with ErrAlreadyWaiting, in an
// *OpError of op "recv". Until then the probe itself waits a little and
// gives up.
func waitRegistered(t *testing.T, s Socket, id uint64) {
	t.Helper()
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		_, err := s.Recv(ctx, id)
		cancel()
		if errors.Is(err, contract.ErrAlreadyWaiting) {
			wantOp(t, err, "recv", id, contract.ErrAlreadyWaiting)
			return
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("probe Recv for id %d: %v, want ErrAlreadyWaiting or a timeout", id, err)
		}
	}
	t.Fatalf("no goroutine came to wait for id %d", id)
}

// pair opens a server socket on port 99 and a client socket.
func pair(t *testing.T, open Opener) (server, client Socket) {
	server, client = open(t, 99), open(t, 0)
	t.Cleanup(func() { client.Close(); server.Close() })
	return server, client
}

// recv is Recv bounded by wait.
func recv(s Socket, id uint64) (*contract.Message, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	return s.Recv(ctx, id)
}

// wantOp checks that err is an *OpError of op for RPC id wrapping cause.
func wantOp(t *testing.T, err error, op string, id uint64, cause error) {
	t.Helper()
	var oe *contract.OpError
	if !errors.As(err, &oe) || !errors.Is(err, cause) {
		t.Fatalf("got %v, want an *OpError wrapping %v", err, cause)
	}
	if oe.Op != op || oe.ID != id {
		t.Errorf("OpError %q id %d, want %q id %d", oe.Op, oe.ID, op, id)
	}
}

// wantClosed checks that err is ErrClosed and matches net.ErrClosed.
func wantClosed(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, contract.ErrClosed) || !errors.Is(err, net.ErrClosed) {
		t.Errorf("%s: %v, want ErrClosed (matching net.ErrClosed)", what, err)
	}
}
