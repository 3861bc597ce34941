package erpc_test

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/internal/testkit/socktest"
	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/erpc"
)

// testConfig is the socket configuration of every test socket. Inside a
// testing/synctest bubble the engine must not busy-poll (the clock does
// not advance while a goroutine spins).
func testConfig() *sock.Config {
	return &sock.Config{PollDuration: -1}
}

// Hosts of the in-memory network.
var (
	serverHost = netip.MustParseAddr("10.0.0.1")
	clientHost = netip.MustParseAddr("10.0.0.2")
	otherHost  = netip.MustParseAddr("10.0.0.3")
	nobody     = netip.MustParseAddr("10.0.0.99")
)

const nexusPort = 1000

// memConfig returns a Nexus configuration whose sockets live on nw.
func memConfig(nw *memnet.Network) *erpc.Config {
	return &erpc.Config{Open: func(a netip.AddrPort) (*sock.Socket, error) {
		c, err := socktest.OpenMem(nw, a, testConfig())
		if err != nil {
			return nil, err
		}
		return c, nil
	}}
}

// event is one call of a session-management handler.
type event struct {
	s   erpc.Session
	ev  erpc.SMEvent
	err error
}

// recorder collects session-management events.
type recorder struct{ events []event }

func (r *recorder) handler(s erpc.Session, ev erpc.SMEvent, err error) {
	r.events = append(r.events, event{s, ev, err})
}

// last returns the last event of s, if any.
func (r *recorder) last(s erpc.Session) (event, bool) {
	for i := len(r.events) - 1; i >= 0; i-- {
		if r.events[i].s == s {
			return r.events[i], true
		}
	}
	return event{}, false
}

// server is a Nexus with one Rpc whose event loop runs in its own
// goroutine until stopped.
type server struct {
	nx     *erpc.Nexus
	rpc    *erpc.Rpc
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// newServer opens a Nexus at host, lets register install handlers, and
// creates Rpc 0; setup, if not nil, runs on the Rpc before its loop
// starts (to create sessions of its own, say).
func newServer(t *testing.T, cfg *erpc.Config, host netip.Addr, register func(nx *erpc.Nexus), setup func(r *erpc.Rpc)) *server {
	t.Helper()
	nx, err := erpc.NewNexus(netip.AddrPortFrom(host, nexusPort), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if register != nil {
		register(nx)
	}
	r, err := nx.NewRpc(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(r)
	}
	s := &server{nx: nx, rpc: r}
	s.start()
	return s
}

// start runs the Rpc's event loop in a new goroutine.
func (s *server) start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.rpc.Serve(ctx)
	}()
}

// stop ends the event loop goroutine and waits for it.
func (s *server) stop() {
	s.cancel()
	s.wg.Wait()
}

// close stops the loop and closes Rpc and Nexus.
func (s *server) close() {
	s.stop()
	s.rpc.Close()
	s.nx.Close()
}

// client is a Nexus with one Rpc owned by the test goroutine.
type client struct {
	nx        *erpc.Nexus
	rpc       *erpc.Rpc
	rec       recorder
	completed []*call // in the order the continuations ran
}

func newClient(t *testing.T, cfg *erpc.Config, host netip.Addr) *client {
	t.Helper()
	nx, err := erpc.NewNexus(netip.AddrPortFrom(host, nexusPort), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &client{nx: nx}
	c.rpc, err = nx.NewRpc(0, c.rec.handler)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *client) close() {
	c.rpc.Close()
	c.nx.Close()
}

// runUntil runs the client's event loop until cond holds, failing the
// test if it does not within limit (of the bubble's virtual time).
func (c *client) runUntil(t *testing.T, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if !time.Now().Before(deadline) {
			t.Fatalf("condition not reached within %v", limit)
		}
		if err := c.rpc.RunEventLoop(time.Millisecond); err != nil {
			t.Fatalf("event loop: %v", err)
		}
	}
}

// connect creates a session from c to the server's Rpc 0 and waits for
// Connected.
func (c *client) connect(t *testing.T, srv netip.Addr) erpc.Session {
	t.Helper()
	s, err := c.rpc.CreateSession(netip.AddrPortFrom(srv, nexusPort), 0)
	if err != nil {
		t.Fatal(err)
	}
	c.runUntil(t, 5*time.Second, func() bool { _, ok := c.rec.last(s); return ok })
	if e, _ := c.rec.last(s); e.ev != erpc.Connected {
		t.Fatalf("session: %v %v, want connected", e.ev, e.err)
	}
	return s
}

// result is the outcome of one request.
type result struct {
	data []byte
	err  error
	done bool
}

// call is a request in flight, its buffers and its result.
type call struct {
	req, resp *erpc.MsgBuffer
	result
}

// enqueue sends data on s with a continuation that fills in the call.
func (c *client) enqueue(t *testing.T, s erpc.Session, reqType uint8, data []byte, opts ...erpc.ReqOption) *call {
	t.Helper()
	cl, err := c.try(s, reqType, data, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func (c *client) try(s erpc.Session, reqType uint8, data []byte, opts ...erpc.ReqOption) (*call, error) {
	req, err := c.rpc.AllocMsgBuffer(len(data))
	if err != nil {
		return nil, err
	}
	copy(req.Data(), data)
	resp, _ := c.rpc.AllocMsgBuffer(0)
	cl := &call{req: req, resp: resp}
	if err := c.rpc.EnqueueRequest(s, reqType, req, resp, c.done, cl, opts...); err != nil {
		c.rpc.FreeMsgBuffer(req)
		c.rpc.FreeMsgBuffer(resp)
		return nil, err
	}
	return cl, nil
}

// done is the continuation of every call: it keeps the result and frees
// the buffers (which panics if the layer still held them).
func (c *client) done(resp *erpc.MsgBuffer, tag any, err error) {
	cl := tag.(*call)
	cl.err, cl.done = err, true
	c.completed = append(c.completed, cl)
	if err == nil {
		cl.data = append([]byte(nil), resp.Data()...)
	}
	c.rpc.FreeMsgBuffer(cl.req)
	c.rpc.FreeMsgBuffer(cl.resp)
}

func allDone(calls []*call) func() bool {
	return func() bool {
		for _, c := range calls {
			if !c.done {
				return false
			}
		}
		return true
	}
}

// echo answers with the request's bytes, from the handle's own buffer.
func echo(h *erpc.ReqHandle) {
	resp := h.PreResp()
	req := h.Request()
	if len(req) > resp.MaxLen() {
		big, err := h.Rpc().AllocMsgBuffer(len(req))
		if err != nil {
			panic(err)
		}
		copy(big.Data(), req)
		_ = h.Rpc().EnqueueResponse(h, big)
		h.Rpc().FreeMsgBuffer(big)
		return
	}
	_ = h.Rpc().ResizeMsgBuffer(resp, len(req))
	copy(resp.Data(), req)
	_ = h.Rpc().EnqueueResponse(h, resp)
}

// respond answers h with data.
func respond(h *erpc.ReqHandle, data []byte) error {
	resp := h.PreResp()
	if err := h.Rpc().ResizeMsgBuffer(resp, len(data)); err != nil {
		return err
	}
	copy(resp.Data(), data)
	return h.Rpc().EnqueueResponse(h, resp)
}

// echoWorld starts, on nw, a server answering request type 1 with echo
// in its event loop and a client with a session to it; both close when
// the test (or its synctest bubble) ends, the client first.
func echoWorld(t *testing.T, nw *memnet.Network) (*server, *client, erpc.Session) {
	t.Helper()
	srv := newServer(t, memConfig(nw), serverHost, func(nx *erpc.Nexus) {
		_ = nx.Register(1, echo, erpc.Dispatch)
	}, nil)
	t.Cleanup(srv.close)
	cli := newClient(t, memConfig(nw), clientHost)
	t.Cleanup(cli.close)
	return srv, cli, cli.connect(t, serverHost)
}
