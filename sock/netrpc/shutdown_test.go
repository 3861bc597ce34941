package netrpc_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"net/rpc"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/internal/testkit/socktest"
	"github.com/homa-go/homa/sock/netrpc"
)

// Shutdown lets a call in flight finish and its reply reach the caller,
// answers calls that arrive meanwhile with an error saying so, and
// returns once the reply is out; then Serve returns ErrServerClosed.
func TestShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t)
		defer w.close()
		c := w.client(t)
		defer c.Close()
		slow := c.Go("Arith.Sleep", time.Second, new(int), nil)
		synctest.Wait() // the call runs
		start := time.Now()
		shut := make(chan error, 1)
		go func() { shut <- w.srv.Shutdown(context.Background()) }()
		synctest.Wait()

		var r int
		err := c.Call("Arith.Multiply", &Args{2, 3}, &r)
		if !isServerError(err, "shutting down") {
			t.Errorf("call during Shutdown: %v, want a ServerError saying the server is shutting down", err)
		}
		select {
		case err := <-shut:
			t.Fatalf("Shutdown returned %v while a call ran", err)
		default:
		}
		<-slow.Done
		if slow.Error != nil {
			t.Errorf("call in flight at Shutdown: %v, want its reply", slow.Error)
		}
		if err := <-shut; err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if time.Since(start) < time.Second {
			t.Errorf("Shutdown returned after %v, before the call of 1s ended", time.Since(start))
		}
		<-w.served
		if !errors.Is(w.err, netrpc.ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", w.err)
		}
		if err := w.srv.Close(); err != nil {
			t.Errorf("Close after Shutdown: %v", err)
		}
	})
}

// Shutdown gives up when its context ends: it closes the server and
// returns the context's error; the call in flight fails.
func TestShutdownContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t)
		defer w.close()
		c := w.client(t)
		defer c.Close()
		slow := c.Go("Arith.Sleep", time.Hour, new(int), nil)
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		err := w.srv.Shutdown(ctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Shutdown with a call of an hour running: %v, want context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d != time.Second {
			t.Errorf("Shutdown returned after %v, want its context's 1s", d)
		}
		<-slow.Done
		if slow.Error == nil || isServerError(slow.Error, "") {
			t.Errorf("call in flight when Shutdown gave up: %v, want the transport's error", slow.Error)
		}
	})
}

// Close stops the server at once: the call in flight fails, Serve
// returns ErrServerClosed once the call has returned, and Close is
// idempotent.
func TestServerClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t)
		defer w.close()
		c := w.client(t)
		defer c.Close()
		slow := c.Go("Arith.Sleep", time.Second, new(int), nil)
		synctest.Wait()
		start := time.Now()
		for range 2 {
			if err := w.srv.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("Close waited %v", d)
		}
		<-slow.Done
		if slow.Error == nil || isServerError(slow.Error, "") {
			t.Errorf("call in flight at Close: %v, want the transport's error", slow.Error)
		}
		<-w.served
		if !errors.Is(w.err, netrpc.ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", w.err)
		}
		if err := w.srv.Serve(); err == nil || errors.Is(err, netrpc.ErrServerClosed) {
			t.Errorf("second Serve: %v, want an error", err)
		}
		var r int
		if err := c.Call("Arith.Multiply", &Args{1, 2}, &r); !errors.Is(err, rpc.ErrShutdown) {
			t.Errorf("call after the server closed: %v, want rpc.ErrShutdown", err)
		}
	})
}

// Shutdown waits for a large reply until its client has pulled all of
// it.
func TestShutdownLargeReply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t)
		defer w.close()
		c := w.client(t)
		defer c.Close()
		var out []byte
		call := c.Go("Arith.SlowMake", 5_000_000, &out, nil)
		synctest.Wait()
		if err := w.srv.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		<-call.Done
		if call.Error != nil || len(out) != 5_000_000 {
			t.Errorf("large call in flight at Shutdown: %d bytes, %v", len(out), call.Error)
		}
	})
}

// During Shutdown, parts of large requests are refused too, and what
// is refused is counted as such.
func TestShutdownRefusesParts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t)
		defer w.close()
		c := w.client(t)
		defer c.Close()
		slow := c.Go("Arith.Sleep", time.Second, new(int), nil)
		synctest.Wait()
		shut := make(chan error, 1)
		go func() { shut <- w.srv.Shutdown(context.Background()) }()
		synctest.Wait()
		cc, err := socktest.OpenMem(w.nw, netip.AddrPortFrom(clientHost, 0), testConfig())
		if err != nil {
			t.Fatal(err)
		}
		raw := cc
		defer raw.Close()
		m, err := raw.Call(context.Background(), serverAddr, partFrame(kindRequestPart, 3<<20, 0, 1, make([]byte, 64<<10)))
		if err != nil {
			t.Fatal(err)
		}
		if m.Data[1] != 2 || !bytes.Contains(m.Data, []byte("shutting down")) {
			t.Errorf("a part during Shutdown: answered %q, want an error saying the server is shutting down", m.Data)
		}
		err = c.Call("Arith.Echo", make([]byte, 2_000_000), new([]byte))
		if !isServerError(err, "shutting down") {
			t.Errorf("a large call during Shutdown: %v, want a ServerError saying the server is shutting down", err)
		}
		<-slow.Done
		if err := <-shut; err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if d := w.srv.Drops(); d.Shutdown < 2 || d.Malformed != 0 {
			t.Errorf("Drops = %+v, want at least 2 for Shutdown and none malformed", d)
		}
	})
}
