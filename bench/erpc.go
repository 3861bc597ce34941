package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/erpc"
)

// The erpc protocols run package sock/erpc the way its documentation
// says a benchmark should: a Nexus per process; on the server one Rpc
// per CPU, each serving in its own goroutine with a dispatch echo
// handler; on the client one Rpc per client (per core, with as many
// clients as cores), which keeps many requests outstanding through its
// event loop, over sessions spread across the server's Rpcs.

const (
	// erpcEchoType is the request type of the echo handler.
	erpcEchoType = 1
	// erpcWindow is the requests one session may have outstanding (the
	// layer's default); a client opens enough sessions for its
	// outstanding requests.
	erpcWindow = 8
	// erpcMaxClients is the most Rpcs one Nexus holds (ids are a byte).
	erpcMaxClients = 256
	// erpcPortRoom keeps a Nexus opened on a free port low enough that
	// the ports of its Rpcs (the Nexus's port + 1 + id, or 256 more)
	// are server ports too.
	erpcPortRoom = 512
	// erpcCloseWait bounds how long a closing client waits for the
	// server to confirm the end of its sessions.
	erpcCloseWait = time.Second
	// erpcMaxMessage is the longest request or reply: the layer's
	// default Config.MaxMessage. One longer than a Homa message
	// (erpc.MaxMsgSize) goes as the layer's large messages do, in
	// fragments of one Homa message each.
	erpcMaxMessage = 8 << 20
	// erpcLargeBytes is what a server Rpc holds of large messages being
	// reassembled or pulled (Config.LargeMessageBytes): a window of
	// requests of the largest size from each of a few clients.
	erpcLargeBytes = 4 * erpcWindow * erpcMaxMessage
)

// erpcProtocol is the erpc layer over transport t.
func erpcProtocol(name string, t sock.Transport) Protocol {
	return Protocol{
		name: name, maxSize: erpcMaxMessage, homa: true, raw: t == sock.Raw, maxClients: erpcMaxClients, layer: true, clip: true,
		desc: "sock/erpc over Homa over " + TransportName(t) + ": a Nexus per process, an Rpc per client keeping its RPCs " +
			"outstanding through its event loop, a dispatch echo handler in each of the server's Rpcs (one per CPU)",
		serve: func(ctx context.Context, addr netip.AddrPort, o ServerOptions) (Server, error) {
			return serveErpc(ctx, addr, over(o.Engine, t), o.ReplySize)
		},
		dial: func(ctx context.Context, addr netip.AddrPort, o clientOptions) (client, error) {
			return dialErpc(ctx, addr, over(o.Engine, t), o)
		},
	}
}

// erpcConfig is the layer's configuration over the socket configuration
// cfg; its sockets are opened by openSocket, so that tests can refuse
// raw ones.
func erpcConfig(cfg *sock.Config) *erpc.Config {
	return &erpc.Config{
		Socket:            cfg,
		Open:              func(a netip.AddrPort) (*sock.Socket, error) { return openSocket(a, cfg) },
		SessionWindow:     erpcWindow,
		MaxMessage:        erpcMaxMessage,
		LargeMessageBytes: erpcLargeBytes,
	}
}

// openNexus opens a Nexus at addr; port 0 means a free server port of
// FreePortFirst..FreePortLast-erpcPortRoom, tried as openHomaServer
// does.
func openNexus(addr netip.AddrPort, cfg *erpc.Config) (*erpc.Nexus, error) {
	if addr.Port() != 0 {
		return erpc.NewNexus(addr, cfg)
	}
	const n = FreePortLast - erpcPortRoom - FreePortFirst + 1
	start := rand.IntN(n)
	for i := range freePortTries {
		port := uint16(FreePortFirst + (start+i)%n)
		nx, err := erpc.NewNexus(netip.AddrPortFrom(addr.Addr(), port), cfg)
		if !errors.Is(err, sock.ErrPortInUse) {
			return nx, err
		}
	}
	return nil, fmt.Errorf("%w: no free port for a Nexus found in %d tries", sock.ErrPortInUse, freePortTries)
}

// erpcServer is a Nexus whose Rpcs, one per CPU, each serve in a
// goroutine of their own.
type erpcServer struct {
	nx        *erpc.Nexus
	rpcs      []*erpc.Rpc
	replySize int
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	served    atomic.Uint64
	closeOnce sync.Once
}

// serveErpc starts an erpc echo server at addr (port 0: a free one).
func serveErpc(ctx context.Context, addr netip.AddrPort, cfg *sock.Config, replySize int) (*erpcServer, error) {
	nx, err := openNexus(addr, erpcConfig(cfg))
	if err != nil {
		return nil, err
	}
	s := &erpcServer{nx: nx, replySize: replySize}
	if err := nx.Register(erpcEchoType, s.echo, erpc.Dispatch); err != nil {
		return nil, errors.Join(err, nx.Close())
	}
	for i := range runtime.GOMAXPROCS(0) {
		r, err := nx.NewRpc(uint8(i), nil)
		if err != nil {
			return nil, errors.Join(err, s.closeRpcs(), nx.Close())
		}
		s.rpcs = append(s.rpcs, r)
	}
	ctx, s.cancel = context.WithCancel(ctx)
	for _, r := range s.rpcs {
		// Each Rpc is handed to its goroutine before it is used.
		s.wg.Go(func() { _ = r.Serve(ctx) })
	}
	return s, nil
}

// echo is the dispatch handler: it answers with the request, or with
// replySize bytes of it, zero-padded. Short replies go in the handle's
// preallocated buffer; the layer copies the response (or takes a large
// one's storage over), so a pooled one is freed at once.
func (s *erpcServer) echo(h *erpc.ReqHandle) {
	r, req := h.Rpc(), h.Request()
	n := len(req)
	if s.replySize > 0 {
		n = s.replySize
	}
	resp, pooled := h.PreResp(), false
	if n > erpc.PreRespSize {
		if b, err := r.AllocMsgBuffer(n); err == nil {
			resp, pooled = b, true
		} else {
			n = 0 // cannot happen (sizes are checked); the client sees a wrong reply
		}
	}
	if err := r.ResizeMsgBuffer(resp, n); err != nil {
		n = 0
	}
	d := resp.Data()[:n]
	clear(d[copy(d, req):])
	if r.EnqueueResponse(h, resp) == nil {
		s.served.Add(1)
	}
	if pooled {
		r.FreeMsgBuffer(resp)
	}
}

func (s *erpcServer) Addr() netip.AddrPort { return s.nx.Addr() }
func (s *erpcServer) Requests() uint64     { return s.served.Load() }

// close stops the event loops, closes the Nexus (and with it the Rpcs'
// sockets) and waits for the goroutines; it is idempotent.
func (s *erpcServer) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.cancel()
		err = s.nx.Close()
		s.wg.Wait()
		err = errors.Join(err, s.closeRpcs())
	})
	return err
}

// closeRpcs closes the Rpcs, whose goroutines have ended.
func (s *erpcServer) closeRpcs() error {
	var err error
	for _, r := range s.rpcs {
		err = errors.Join(err, r.Close())
	}
	return err
}

// clientShared is what the clients of one run share: the process's
// Nexus, which holds one Rpc per client and closes with the last one.
type clientShared struct {
	mu    sync.Mutex
	nexus *erpc.Nexus
	refs  int
}

// acquireNexus returns the shared Nexus, opening it with open if there
// is none.
func (c *clientShared) acquireNexus(open func() (*erpc.Nexus, error)) (*erpc.Nexus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nexus == nil {
		nx, err := open()
		if err != nil {
			return nil, err
		}
		c.nexus = nx
	}
	c.refs++
	return c.nexus, nil
}

// releaseNexus gives up one reference, closing the Nexus with the last.
func (c *clientShared) releaseNexus() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refs--; c.refs > 0 || c.nexus == nil {
		return nil
	}
	nx := c.nexus
	c.nexus = nil
	return nx.Close()
}

// erpcClient is one Rpc with its sessions. Latency mode calls it with
// call (Rpc.Call, the blocking form); throughput and workload modes drive
// it as an asyncClient from one goroutine, many requests outstanding.
type erpcClient struct {
	shared   *clientShared
	rpc      *erpc.Rpc
	index    int
	sessions []erpc.Session
	slots    []*erpcSlot
	mu       sync.Mutex // held by call: the Rpc serves one goroutine at a time

	// Session events, from the Rpc's event loop.
	events    int // events seen
	lastEvent erpc.SMEvent
	lastErr   error
}

// erpcSlot is one outstanding request's buffers and completion.
type erpcSlot struct {
	id        int
	s         erpc.Session
	req, resp *erpc.MsgBuffer
	done      completion
}

// dialErpc makes client o.index: Rpc o.index of the run's Nexus, with
// sessions to the server's Rpcs at the Nexus addr, enough for
// o.outstanding requests in their windows.
func dialErpc(ctx context.Context, addr netip.AddrPort, cfg *sock.Config, o clientOptions) (_ *erpcClient, err error) {
	if o.shared == nil {
		o.shared = &clientShared{}
	}
	nx, err := o.shared.acquireNexus(func() (*erpc.Nexus, error) {
		return openNexus(LocalFor(addr), erpcConfig(cfg))
	})
	if err != nil {
		return nil, err
	}
	c := &erpcClient{shared: o.shared, index: o.index}
	c.rpc, err = nx.NewRpc(uint8(o.index), c.event)
	if err != nil {
		return nil, errors.Join(err, o.shared.releaseNexus())
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
		}
	}()
	// The server has Rpcs 0..n-1: connect to each until one is missing,
	// then add sessions round the ring until the window holds
	// o.outstanding requests.
	want := max(1, (o.outstanding+erpcWindow-1)/erpcWindow)
	servers := 0
	for id := 0; id < erpcMaxClients; id++ {
		s, err := c.connect(ctx, addr, uint8(id))
		if errors.Is(err, erpc.ErrNoSuchRpc) && id > 0 {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("erpc session to Rpc %d of %v: %w", id, addr, err)
		}
		c.sessions = append(c.sessions, s)
		servers++
	}
	for len(c.sessions) < want {
		id := uint8((o.index + len(c.sessions)) % servers)
		s, err := c.connect(ctx, addr, id)
		if err != nil {
			return nil, fmt.Errorf("erpc session to Rpc %d of %v: %w", id, addr, err)
		}
		c.sessions = append(c.sessions, s)
	}
	return c, nil
}

// event records a session event.
func (c *erpcClient) event(_ erpc.Session, ev erpc.SMEvent, err error) {
	c.events++
	c.lastEvent, c.lastErr = ev, err
}

// waitEvent runs the event loop until a session event comes or ctx
// ends. The layer bounds a connect by its ConnectTimeout and a
// disconnect by the transport's peer timeout.
func (c *erpcClient) waitEvent(ctx context.Context) (erpc.SMEvent, error) {
	seen := c.events
	for c.events == seen {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if err := c.rpc.RunEventLoop(5 * time.Millisecond); err != nil {
			return 0, err
		}
	}
	return c.lastEvent, c.lastErr
}

// connect makes a session to Rpc id of the Nexus at addr and waits
// until it is connected; a session that fails is destroyed.
func (c *erpcClient) connect(ctx context.Context, addr netip.AddrPort, id uint8) (erpc.Session, error) {
	s, err := c.rpc.CreateSession(addr, id)
	if err != nil {
		return erpc.Session{}, err
	}
	ev, err := c.waitEvent(ctx)
	if ev == erpc.Connected {
		return s, nil
	}
	if err == nil {
		err = fmt.Errorf("%w: %v", erpc.ErrConnectFailed, ev)
	}
	return erpc.Session{}, errors.Join(err, c.rpc.DestroySession(s))
}

// call makes one request with Rpc.Call, as an application calling one
// at a time does. Calls from several goroutines take turns.
func (c *erpcClient) call(ctx context.Context, l *lane, req []byte) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	resp, err := c.rpc.Call(ctx, c.sessions[c.index%len(c.sessions)], erpcEchoType, req)
	if err != nil {
		return nil, err
	}
	l.buf = resp // a new slice each time, the caller's
	return resp, nil
}

// start enqueues req as the request of slot, on the slot's session
// (slots go round the sessions, from one that depends on the client, so
// that clients spread over the server's Rpcs); done runs from the
// continuation.
func (c *erpcClient) start(slot int, req []byte, done completion) error {
	for len(c.slots) <= slot {
		id := len(c.slots)
		c.slots = append(c.slots, &erpcSlot{id: id, s: c.sessions[(c.index+id)%len(c.sessions)]})
	}
	sl := c.slots[slot]
	if sl.req == nil || sl.req.MaxLen() < len(req) {
		if sl.req != nil {
			c.rpc.FreeMsgBuffer(sl.req)
		}
		b, err := c.rpc.AllocMsgBuffer(len(req))
		if err != nil {
			sl.req = nil
			return err
		}
		sl.req = b
	}
	if sl.resp == nil {
		b, err := c.rpc.AllocMsgBuffer(len(req)) // grows if a reply is longer
		if err != nil {
			return err
		}
		sl.resp = b
	}
	if err := c.rpc.ResizeMsgBuffer(sl.req, len(req)); err != nil {
		return err
	}
	copy(sl.req.Data(), req)
	sl.done = done
	return c.rpc.EnqueueRequest(sl.s, erpcEchoType, sl.req, sl.resp, c.complete, sl)
}

// complete is the continuation of every request start made.
func (c *erpcClient) complete(resp *erpc.MsgBuffer, tag any, err error) {
	sl := tag.(*erpcSlot)
	var data []byte
	if err == nil {
		data = resp.Data()
	}
	sl.done(sl.id, data, err)
}

// loop runs the event loop until deadline (zero: none), ctx's end or
// stop; a deadline already past handles what is ready now.
func (c *erpcClient) loop(ctx context.Context, deadline time.Time) error {
	switch {
	case deadline.IsZero():
		return c.rpc.Serve(ctx)
	case !time.Now().Before(deadline):
		return c.rpc.RunEventLoopOnce()
	}
	dctx, cancel := context.WithDeadline(ctx, deadline)
	err := c.rpc.Serve(dctx)
	cancel()
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return nil
	}
	return err
}

func (c *erpcClient) stop() { c.rpc.StopEventLoop() }

// singleOwner is true: the Rpc serves one goroutine at a time.
func (c *erpcClient) singleOwner() bool { return true }

// close ends the sessions, waiting a little for the server to confirm
// (so that it frees them), closes the Rpc (failing what is still
// outstanding) and releases the Nexus.
func (c *erpcClient) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), erpcCloseWait)
	defer cancel()
	for _, s := range c.sessions {
		if c.rpc.IsConnected(s) && c.rpc.DestroySession(s) == nil {
			if _, err := c.waitEvent(ctx); err != nil {
				break
			}
		}
	}
	c.sessions = nil
	err := c.rpc.Close()
	return errors.Join(err, c.shared.releaseNexus())
}
