package netrpc

import (
	"context"
	"errors"
	"io"
	"net/rpc"
	"sync"
	"sync/atomic"
	"time"

	"github.com/homa-go/homa/sock"
)

// ErrServerClosed is what Server.Serve returns once Shutdown or Close
// has stopped it, or its socket was closed.
var ErrServerClosed = errors.New("netrpc: server closed")

// Server serves the calls arriving at one Homa server socket with an
// rpc.Server, and stops either gracefully (Shutdown) or at once (Close).
type Server struct {
	p       *workers
	serving atomic.Bool
	done    chan struct{} // closed when Serve returns
}

// NewServer returns a server of the calls arriving at the server socket
// s, which it owns from now on, with rs (rpc.DefaultServer when nil),
// configured by cfg (nil for defaults). Serve starts it.
func NewServer(rs *rpc.Server, s *sock.Socket, cfg *Config) *Server {
	if rs == nil {
		rs = rpc.DefaultServer
	}
	return &Server{p: &workers{server: rs, sh: newServerShared(s, cfg)}, done: make(chan struct{})}
}

// Serve serves calls until Shutdown or Close stops the server or its
// socket is closed, and returns ErrServerClosed once every call it
// started has ended. It may be called once.
//
// Serve keeps a few goroutines waiting for requests; the one that
// receives a request runs the call itself (rpc.Server.ServeRequest) and
// replies, so a call costs no hand-off between goroutines, and another
// starts waiting whenever none is left, up to MaxConcurrentCalls calls
// at once.
func (srv *Server) Serve() error {
	if !srv.serving.CompareAndSwap(false, true) {
		return errors.New("netrpc: Serve called twice")
	}
	defer close(srv.done)
	p := srv.p
	p.wg.Add(1) // Serve's own hold, so spawning never races a zero count
	for range idleWorkers {
		p.spawn()
	}
	p.wg.Done()
	p.wg.Wait()
	p.sh.close()
	return ErrServerClosed
}

// Shutdown stops the server gracefully. From the moment it is called,
// requests that arrive are answered at once with an error saying the
// server is shutting down (the caller's rpc.ServerError; nothing runs),
// and so are the parts of large requests still arriving; calls already
// running finish, and their replies go out, large ones until their
// clients have fetched them. Then it closes the socket, waits for
// Serve's goroutines, and returns nil.
//
// If ctx ends first, Shutdown closes the server as Close does (without
// waiting for the calls still running) and returns ctx.Err(). Replies count as out once their clients have
// acknowledged them (Homa acknowledges a response within a few
// milliseconds), so that a reply lost on the way can still be sent
// again.
func (srv *Server) Shutdown(ctx context.Context) error {
	sh := srv.p.sh
	sh.shutting.Store(true)
	if err := sh.drain(ctx); err != nil {
		sh.close()
		return err
	}
	sh.close()
	if srv.serving.Load() {
		<-srv.done
	}
	return nil
}

// Close stops the server at once: its socket closes, requests waiting
// and replies not yet out are dropped (their callers' Homa RPCs fail),
// and Serve returns once the calls running have returned (their replies
// go nowhere). Close does not wait for them. It is idempotent.
func (srv *Server) Close() error { return srv.p.sh.close() }

// Dropped counts requests the server answered with an error without
// handing them to net/rpc (malformed or refused), and responses
// arriving at its socket; Drops says why.
func (srv *Server) Dropped() uint64 { return srv.p.sh.drops.snapshot().Total() }

// Drops counts what the server refused or discarded, by reason.
func (srv *Server) Drops() Drops { return srv.p.sh.drops.snapshot() }

// drain waits until no call is running, no large reply waits to be
// fetched and every reply sent has been acknowledged, or ctx ends.
func (sh *serverShared) drain(ctx context.Context) error {
	wait := time.Millisecond
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if sh.idle() {
			return nil
		}
		t.Reset(wait)
		wait = min(2*wait, maxDrainPoll)
	}
}

// maxDrainPoll is the longest Shutdown waits between two looks at the
// calls and replies still in progress.
const maxDrainPoll = 50 * time.Millisecond

// idle reports whether no call runs, no large reply waits and every
// reply sent is acknowledged: the socket holds no server RPC beyond
// requests arriving or waiting (which nobody will answer but with the
// shutdown error).
func (sh *serverShared) idle() bool {
	if sh.closed.Load() {
		return true
	}
	if sh.inflight.Load() != 0 || sh.large.replyCount(time.Now()) != 0 {
		return false
	}
	st := sh.s.Stats()
	return st.ServerRPCs-st.IncomingRPCs-st.PendingReplies <= 0
}

// Serve serves the calls arriving at the server socket s with server
// (rpc.DefaultServer when nil) until s is closed; it owns s from now on.
// Like rpc.Server.ServeConn it blocks and returns once every call it
// started has answered. Close the socket to stop it, or use NewServer
// for a graceful Shutdown and for the limits of Config.
func Serve(server *rpc.Server, s *sock.Socket) {
	_ = NewServer(server, s, nil).Serve()
}

// MaxConcurrentCalls bounds the calls Serve runs at once on one socket,
// the engine's default bound on server RPCs; requests beyond it wait in
// the socket.
const MaxConcurrentCalls = 10_000

// idleWorkers is how many of Serve's goroutines wait for requests: one
// that finishes a call while as many are waiting ends.
const idleWorkers = 2

// workers are Serve's goroutines on one socket, each with a codec of its
// own over the shared socket, encoders and decoders.
type workers struct {
	server *rpc.Server
	sh     *serverShared
	wg     sync.WaitGroup
	idle   atomic.Int32 // goroutines waiting in Recv
	total  atomic.Int32 // goroutines
}

// spawn starts another goroutine unless the bound is reached.
func (p *workers) spawn() {
	if p.total.Add(1) > MaxConcurrentCalls {
		p.total.Add(-1)
		return
	}
	p.wg.Add(1)
	go p.run()
}

// run serves one request at a time until the socket closes or enough
// other goroutines are waiting.
func (p *workers) run() {
	defer p.wg.Done()
	defer p.total.Add(-1)
	c := newServerCodec(p.sh, p)
	for {
		err := p.server.ServeRequest(c)
		if err == io.EOF || p.sh.closed.Load() {
			return
		}
		if p.idle.Load() >= idleWorkers {
			return
		}
	}
}
