package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/homa-go/homa/internal/tools/tcpecho"
	"github.com/homa-go/homa/sock"
)

// openSocket opens every Homa socket of bench. DenyRaw replaces it to
// play a host that refuses raw sockets.
var openSocket = sock.Open

// TransportName describes a transport for reports.
func TransportName(t sock.Transport) string {
	if t == sock.UDP {
		return "UDP encapsulation"
	}
	return "raw IP protocol 146"
}

// pollingModes name the engine's Polling modes.
var pollingModes = map[string]sock.Polling{"adaptive": sock.PollAdaptive, "always": sock.PollAlways, "never": sock.PollNever}

// PollingName is the name of a polling mode ("always", "adaptive",
// "never"), as "serve --polling" takes it.
func PollingName(mode sock.Polling) string {
	for name, m := range pollingModes {
		if m == mode {
			return name
		}
	}
	return "adaptive"
}

// ParsePolling is the polling mode of a name PollingName gives.
func ParsePolling(name string) (sock.Polling, bool) {
	m, ok := pollingModes[name]
	return m, ok
}

// echoWorkers is how many goroutines serve requests concurrently.
const echoWorkers = 4

// echoServer answers every request on a socket with the request's bytes,
// or with replySize bytes when that is positive (see tcpecho.AppendReply).
type echoServer struct {
	s         *sock.Socket
	replySize int
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	served    atomic.Uint64
}

// startEcho serves requests on s until ctx ends or close is called,
// echoing each.
func startEcho(ctx context.Context, s *sock.Socket) *echoServer {
	return startEchoReply(ctx, s, 0)
}

// startEchoReply serves requests on s until ctx ends or close is called,
// answering each with replySize bytes (the whole request if 0).
func startEchoReply(ctx context.Context, s *sock.Socket, replySize int) *echoServer {
	ctx, cancel := context.WithCancel(ctx)
	e := &echoServer{s: s, replySize: replySize, cancel: cancel}
	// At least two goroutines in Recv(Any) per shard, so that each
	// shard has one reading while another answers.
	for range max(echoWorkers, 2*s.Shards()) {
		e.wg.Go(func() { e.serve(ctx) })
	}
	return e
}

// zeroCopyEcho is the request size from which the echo server answers
// with the request's own buffer (ReplyOwned) rather than a copy.
const zeroCopyEcho = 64 << 10

func (e *echoServer) serve(ctx context.Context) {
	var buf []byte // a reply longer than its request is built here
	var batch []sock.BatchResponse
	for {
		m, err := e.s.Recv(ctx, sock.Any)
		if err != nil {
			return // ctx ended or the socket closed
		}
		if !m.IsRequest() {
			m.Release()
			continue
		}
		if e.batchable(m) {
			// Echoes of what is complete now go out together.
			batch = e.echoBatch(m, batch[:0], &buf)
			continue
		}
		e.answer(m, &buf)
	}
}

// batchable reports whether m's echo may go in a ReplyBatch: a request
// answered with a copy of itself.
func (e *echoServer) batchable(m *sock.Message) bool {
	return m.IsRequest() && e.replySize == 0 && len(m.Data) < zeroCopyEcho
}

// answer replies to the request m alone, and releases it.
func (e *echoServer) answer(m *sock.Message, buf *[]byte) {
	var err error
	// A client that gave up makes Reply fail; the server goes on.
	switch n := e.replySize; {
	case n == 0 && len(m.Data) >= zeroCopyEcho:
		// The request's own buffer goes back as the response.
		err = e.s.ReplyOwned(m, m.TakeData())
	case n == 0:
		err = e.s.Reply(m, m.Data)
	case n <= len(m.Data):
		err = e.s.Reply(m, m.Data[:n])
	default:
		*buf = tcpecho.AppendReply((*buf)[:0], m.Data, n)
		err = e.s.Reply(m, *buf)
	}
	if err == nil {
		e.served.Add(1)
	}
	m.Release()
}

// echoBatch echoes m and the requests already complete after it (up to
// maxDrain) with one ReplyBatch, and releases them; one it may not batch
// it answers alone.
func (e *echoServer) echoBatch(m *sock.Message, batch []sock.BatchResponse, buf *[]byte) []sock.BatchResponse {
	for k := 0; m != nil; k++ {
		switch {
		case e.batchable(m):
			batch = append(batch, sock.BatchResponse{Req: m, Data: m.Data})
		case m.IsRequest():
			e.answer(m, buf)
		default:
			m.Release()
		}
		m = nil
		if k < maxDrain {
			m, _ = e.s.Recv(ready, sock.Any)
		}
	}
	_ = e.s.ReplyBatch(batch) // a client that gave up makes a reply fail; the server goes on
	for _, r := range batch {
		e.served.Add(1)
		r.Req.Release()
	}
	clear(batch)
	return batch
}

// close stops the workers and closes the socket.
func (e *echoServer) Close() error {
	e.cancel()
	err := e.s.Close()
	e.wg.Wait()
	return err
}

// addr is the address clients send to.
func (e *echoServer) Addr() netip.AddrPort { return e.s.LocalAddr() }

// requests counts the requests answered so far.
func (e *echoServer) Requests() uint64 { return e.served.Load() }

// HomaClient is a Homa Pinger: a client socket, and the in-process echo
// server it talks to, if any. It is also bench's Homa client: call from
// any number of goroutines at once, or start and loop from one (an
// asyncClient).
type HomaClient struct {
	s      *sock.Socket
	dst    netip.AddrPort
	t      sock.Transport
	last   *sock.Message // the previous response, recycled on the next call
	server *echoServer

	// The asyncClient side, for the goroutine that drives it: requests
	// started wait in pending until loop sends them, together.
	done    completion
	stopped bool
	pending []sock.BatchRequest
}

// ready is a context that has ended: Recv with it returns a message
// already complete, or the context's error at once.
var ready = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// maxDrain bounds the messages taken without waiting after one that
// was waited for, before what they started is sent.
const maxDrain = 64

// LocalFor is the local address of a client socket for dst: the
// unspecified address of dst's family, port 0 (a client port).
func LocalFor(dst netip.AddrPort) netip.AddrPort {
	if dst.Addr().Is4() {
		return netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
	}
	return netip.AddrPortFrom(netip.IPv6Unspecified(), 0)
}

// DialHoma opens a client socket for dst on localFor(dst).
func DialHoma(dst netip.AddrPort, cfg *sock.Config) (*HomaClient, error) {
	s, err := openSocket(LocalFor(dst), cfg)
	if err != nil {
		return nil, err
	}
	return &HomaClient{s: s, dst: dst, t: cfg.Transport}, nil
}

// Socket is the client's socket.
func (c *HomaClient) Socket() *sock.Socket { return c.s }

// ServerSocket is the socket of the echo server HomaLoopback started,
// or nil.
func (c *HomaClient) ServerSocket() *sock.Socket {
	if c.server == nil {
		return nil
	}
	return c.server.s
}

// Remote is where the client sends its requests.
func (c *HomaClient) Remote() netip.AddrPort { return c.dst }

// Transport is the transport of the client's socket.
func (c *HomaClient) Transport() sock.Transport { return c.t }

// RoundTrip sends req and returns the response, valid until the next
// call.
func (c *HomaClient) RoundTrip(ctx context.Context, req []byte) ([]byte, error) {
	if c.last != nil {
		c.last.Release()
		c.last = nil
	}
	m, err := c.s.Call(ctx, c.dst, req)
	if err != nil {
		return nil, err
	}
	c.last = m
	return m.Data, nil
}

// call is roundTrip for concurrent callers: each keeps its last response
// in its own lane.
func (c *HomaClient) call(ctx context.Context, l *lane, req []byte) ([]byte, error) {
	l.release()
	m, err := c.s.Call(ctx, c.dst, req)
	if err != nil {
		return nil, err
	}
	l.msg = m
	return m.Data, nil
}

// start queues req with the slot as its completion cookie: loop sends
// what was started together (sock.Socket.SendBatch), before it waits.
func (c *HomaClient) start(slot int, req []byte, done completion) error {
	c.done = done
	c.pending = append(c.pending, sock.BatchRequest{Dst: c.dst, Data: req, Cookie: uint64(slot)})
	return nil
}

// flush sends the requests started since the last flush; a request that
// could not be sent completes with its error.
func (c *HomaClient) flush() {
	if len(c.pending) == 0 {
		return
	}
	ids, err := c.s.SendBatch(c.pending)
	pending := c.pending
	c.pending = c.pending[:0]
	if err == nil {
		return
	}
	for i, r := range pending {
		if ids[i] == 0 {
			c.done(int(r.Cookie), nil, err)
		}
	}
}

// loop receives the responses of the RPCs start sent, each with
// Recv(ctx, sock.Any), until deadline (zero: none), ctx's end or stop.
// After each response waited for, it takes those already complete
// without waiting (up to maxDrain), then sends what their completions
// started, in one batch.
func (c *HomaClient) loop(ctx context.Context, deadline time.Time) error {
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	for c.stopped = false; !c.stopped; {
		c.flush()
		m, err := c.s.Recv(ctx, sock.Any)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) && !deadline.IsZero() && !time.Now().Before(deadline) {
				return nil
			}
			return err
		}
		for k := 0; m != nil; k++ {
			c.done(int(m.Cookie), m.Data, m.Err)
			m.Release()
			m = nil
			if k < maxDrain && !c.stopped {
				m, _ = c.s.Recv(ready, sock.Any)
			}
		}
	}
	c.flush()
	return nil
}

func (c *HomaClient) stop() { c.stopped = true }

// singleOwner is false: call serves any number of goroutines.
func (c *HomaClient) singleOwner() bool { return false }

// Close closes the client and the server HomaLoopback started.
func (c *HomaClient) Close() error {
	if c.last != nil {
		c.last.Release()
		c.last = nil
	}
	err := c.s.Close()
	if c.server != nil {
		err = errors.Join(err, c.server.Close())
	}
	return err
}

// A server socket opened on port 0 gets a free Homa server port from
// FreePortFirst..FreePortLast, the upper half of the server ports
// (1..32767; sock.Open on port 0 would make a client socket, which
// receives no requests): the ports are tried in turn from a random one,
// at most freePortTries of them, until one is not in use.
const (
	FreePortFirst = 16384
	FreePortLast  = 32767
	freePortTries = 256
)

// openHomaServer opens a server socket on addr; port 0 means a free port
// of FreePortFirst..FreePortLast.
func openHomaServer(addr netip.AddrPort, cfg *sock.Config) (*sock.Socket, error) {
	if addr.Port() != 0 {
		return openSocket(addr, cfg)
	}
	const n = FreePortLast - FreePortFirst + 1
	start := rand.IntN(n)
	for i := range freePortTries {
		port := uint16(FreePortFirst + (start+i)%n)
		s, err := openSocket(netip.AddrPortFrom(addr.Addr(), port), cfg)
		if !errors.Is(err, sock.ErrPortInUse) {
			return s, err
		}
	}
	return nil, fmt.Errorf("%w: no free Homa server port found in %d tries (of %d..%d)", sock.ErrPortInUse, freePortTries, FreePortFirst, FreePortLast)
}

// HomaLoopback starts an echo server on host (a loopback address) and
// returns a client for it.
func HomaLoopback(ctx context.Context, host netip.Addr, t sock.Transport) (*HomaClient, error) {
	s, err := openHomaServer(netip.AddrPortFrom(host, 0), &sock.Config{Transport: t})
	if err != nil {
		return nil, err
	}
	server := startEcho(ctx, s)
	c, err := DialHoma(s.LocalAddr(), &sock.Config{Transport: t})
	if err != nil {
		return nil, errors.Join(err, server.Close())
	}
	c.server = server
	return c, nil
}
