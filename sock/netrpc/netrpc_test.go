package netrpc_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"net/rpc"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/internal/testkit/socktest"
	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/netrpc"
)

// Many calls in flight at once from several clients all get their own
// replies.
func TestConcurrentCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t)
		defer w.close()
		const clients, calls = 3, 100
		var wg sync.WaitGroup
		for range clients {
			c := w.client(t)
			defer c.Close()
			for i := range calls {
				wg.Go(func() {
					var prod int
					if err := c.Call("Arith.Multiply", &Args{i, i + 1}, &prod); err != nil {
						t.Errorf("Multiply(%d, %d): %v", i, i+1, err)
					} else if prod != i*(i+1) {
						t.Errorf("Multiply(%d, %d) = %d", i, i+1, prod)
					}
					var q Quotient
					if err := c.Call("Arith.Divide", &Args{1000 + i, 7}, &q); err != nil {
						t.Errorf("Divide(%d, 7): %v", 1000+i, err)
					} else if q != (Quotient{(1000 + i) / 7, (1000 + i) % 7}) {
						t.Errorf("Divide(%d, 7) = %+v", 1000+i, q)
					}
				})
			}
		}
		wg.Wait()
	})
}

// Asynchronous calls (Client.Go) complete in any order, each with its
// own reply.
func TestGo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t)
		defer w.close()
		c := w.client(t)
		defer c.Close()
		done := make(chan *rpc.Call, 10)
		replies := make([]int, 10)
		for i := range replies {
			c.Go("Arith.Multiply", &Args{i, 3}, &replies[i], done)
		}
		for range replies {
			if call := <-done; call.Error != nil {
				t.Fatal(call.Error)
			}
		}
		for i, r := range replies {
			if r != 3*i {
				t.Errorf("reply %d = %d, want %d", i, r, 3*i)
			}
		}
	})
}

// An error returned by the service is the call's rpc.ServerError, and
// the client keeps working.
func TestServiceError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t)
		defer w.close()
		c := w.client(t)
		defer c.Close()
		var q Quotient
		err := c.Call("Arith.Divide", &Args{1, 0}, &q)
		if !isServerError(err, "divide by zero") {
			t.Fatalf("Divide by zero: %v (%T), want the ServerError \"divide by zero\"", err, err)
		}
		for _, method := range []string{"Arith.Nope", "Nobody.Multiply", "NoDot"} {
			var r int
			if err := c.Call(method, &Args{1, 2}, &r); !isServerError(err, "rpc:") {
				t.Errorf("%s: %v, want net/rpc's ServerError", method, err)
			}
		}
		// A body the method cannot decode into its argument type.
		var r int
		if err := c.Call("Arith.Multiply", "not Args", &r); !isServerError(err, "") {
			t.Errorf("Multiply with a string: %v, want a ServerError", err)
		}
		if err := c.Call("Arith.Multiply", &Args{6, 7}, &r); err != nil || r != 42 {
			t.Fatalf("Multiply after errors = %d, %v", r, err)
		}
	})
}

// A call to a server that does not answer fails with an error matching
// sock.ErrPeerTimeout, as does every call in flight; then the client is
// shut down, as after a broken connection.
func TestDeadServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t)
		defer w.close()
		c := rpc.NewClientWithCodec(w.codec(t, netip.MustParseAddrPort("10.0.0.9:4000")))
		defer c.Close()
		start := time.Now()
		done := make(chan *rpc.Call, 5)
		for i := range 5 {
			c.Go("Arith.Multiply", &Args{i, i}, new(int), done)
		}
		for range 5 {
			if call := <-done; !errors.Is(call.Error, sock.ErrPeerTimeout) || !errors.Is(call.Error, netrpc.ErrServerUnavailable) {
				t.Errorf("call to a dead server: %v, want ErrServerUnavailable and sock.ErrPeerTimeout", call.Error)
			}
		}
		t.Logf("calls failed after %v", time.Since(start))
		if err := c.Call("Arith.Multiply", &Args{1, 1}, new(int)); !errors.Is(err, rpc.ErrShutdown) {
			t.Errorf("call after the failure: %v, want rpc.ErrShutdown", err)
		}
	})
}

// A server that goes away while a call runs: the call fails with
// sock.ErrPeerTimeout.
func TestServerGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t)
		c := w.client(t)
		defer c.Close()
		call := c.Go("Arith.Sleep", time.Second, new(int), nil)
		synctest.Wait() // the request is with the server
		w.server.Close()
		<-call.Done
		if !errors.Is(call.Error, sock.ErrPeerTimeout) {
			t.Errorf("call to a server that closed: %v, want sock.ErrPeerTimeout", call.Error)
		}
		w.close() // Serve returns once the Sleep is over
	})
}

// Closing the client ends calls in flight with rpc.ErrShutdown and is
// idempotent at the codec; closing the server socket ends Serve.
func TestClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t)
		codec := w.codec(t, serverAddr)
		c := rpc.NewClientWithCodec(codec)
		var r int
		if err := c.Call("Arith.Multiply", &Args{2, 3}, &r); err != nil || r != 6 {
			t.Fatalf("Multiply = %d, %v", r, err)
		}
		call := c.Go("Arith.Sleep", time.Second, new(int), nil)
		synctest.Wait()
		if err := c.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		<-call.Done
		if !errors.Is(call.Error, rpc.ErrShutdown) {
			t.Errorf("call in flight at Close: %v, want rpc.ErrShutdown", call.Error)
		}
		if err := c.Call("Arith.Multiply", &Args{2, 3}, &r); !errors.Is(err, rpc.ErrShutdown) {
			t.Errorf("call after Close: %v, want rpc.ErrShutdown", err)
		}
		if err := codec.Close(); err != nil {
			t.Errorf("second codec Close: %v", err)
		}
		w.close()
		if err := w.server.Close(); err != nil {
			t.Errorf("second server Close: %v", err)
		}
	})
}

// A server codec's Close stops ServeCodec and is idempotent.
func TestServerCodecClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t)
		defer w.close()
		conn, err := socktest.OpenMem(w.nw, netip.AddrPortFrom(serverAddr.Addr(), 4001), testConfig())
		if err != nil {
			t.Fatal(err)
		}
		codec := netrpc.NewServerCodec(conn)
		srv := rpc.NewServer()
		if err := srv.Register(new(Arith)); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			srv.ServeCodec(codec)
		}()
		c := rpc.NewClientWithCodec(w.codec(t, netip.AddrPortFrom(serverAddr.Addr(), 4001)))
		defer c.Close()
		var r int
		if err := c.Call("Arith.Multiply", &Args{4, 5}, &r); err != nil || r != 20 {
			t.Fatalf("Multiply = %d, %v", r, err)
		}
		for range 2 {
			if err := codec.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		}
		<-done
	})
}

// A request that is not a frame of this package is answered with an
// error and counted; net/rpc never sees it.
func TestMalformedRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t)
		defer w.close()
		conn, err := socktest.OpenMem(w.nw, netip.AddrPortFrom(serverAddr.Addr(), 4002), testConfig())
		if err != nil {
			t.Fatal(err)
		}
		codec := netrpc.NewServerCodec(conn)
		srv := rpc.NewServer()
		if err := srv.Register(new(Arith)); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			srv.ServeCodec(codec)
		}()
		defer func() { codec.Close(); <-done }()

		cc, err := socktest.OpenMem(w.nw, netip.AddrPortFrom(clientHost, 0), testConfig())
		if err != nil {
			t.Fatal(err)
		}
		raw := cc
		defer raw.Close()
		dst := netip.AddrPortFrom(serverAddr.Addr(), 4002)
		for i, junk := range [][]byte{{1}, {9, 1, 0, 1, 'x'}, {1, 2, 0, 1, 'x'}, {1, 1, 0, 0}, {1, 1, 0, 9, 'x'}} {
			resp, err := raw.Call(context.Background(), dst, junk)
			if err != nil {
				t.Fatalf("junk %d: %v", i, err)
			}
			if !bytes.Contains(resp.Data, []byte("malformed")) {
				t.Errorf("junk %x answered with %q, want an error about a malformed message", junk, resp.Data)
			}
			resp.Release()
		}
		if n := codec.Dropped(); n != 5 {
			t.Errorf("Dropped = %d, want 5", n)
		}
	})
}

// A malformed response fails its call with an error string; the client
// keeps working.
func TestMalformedResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{})
		defer nw.Close()
		sc, err := socktest.OpenMem(nw, serverAddr, testConfig())
		if err != nil {
			t.Fatal(err)
		}
		liar := sc
		defer liar.Close()
		go func() {
			for {
				m, err := liar.Recv(context.Background(), sock.Any)
				if err != nil {
					return
				}
				_ = liar.Reply(m, []byte{1, 2, 0, 0, 0xff, 0xff, 0xff, 0xff})
				m.Release()
			}
		}()
		cc, err := socktest.OpenMem(nw, netip.AddrPortFrom(clientHost, 0), testConfig())
		if err != nil {
			t.Fatal(err)
		}
		codec := netrpc.NewClientCodec(cc, serverAddr)
		c := rpc.NewClientWithCodec(codec)
		defer c.Close()
		for range 2 {
			if err := c.Call("Arith.Multiply", &Args{1, 2}, new(int)); !isServerError(err, "malformed") {
				t.Errorf("call answered with junk: %v, want an error about a malformed message", err)
			}
		}
		if n := codec.Dropped(); n != 2 {
			t.Errorf("Dropped = %d, want 2", n)
		}
	})
}

// Serve runs calls side by side: a slow call does not hold up the
// others, and many slow calls run at once.
func TestServeConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t)
		defer w.close()
		c := w.client(t)
		defer c.Close()
		start := time.Now()
		slow := make([]*rpc.Call, 20)
		for i := range slow {
			slow[i] = c.Go("Arith.Sleep", time.Second, new(int), nil)
		}
		synctest.Wait()
		var r int
		if err := c.Call("Arith.Multiply", &Args{3, 4}, &r); err != nil || r != 12 {
			t.Fatalf("Multiply = %d, %v", r, err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("a quick call behind slow ones took %v", d)
		}
		for _, call := range slow {
			<-call.Done
			if call.Error != nil {
				t.Fatal(call.Error)
			}
		}
		if d := time.Since(start); d != time.Second {
			t.Errorf("20 calls of 1s took %v, want 1s: they ran one after another", d)
		}
	})
}
