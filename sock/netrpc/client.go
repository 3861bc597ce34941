package netrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/rpc"
	"sync"
	"sync/atomic"

	"github.com/homa-go/homa/sock"
)

// ClientCodec is an rpc.ClientCodec that makes each call a Homa RPC from
// its socket to one server. It owns the socket: it is the only reader of
// its messages, and Close closes it.
//
// rpc.Client calls WriteRequest from the goroutines making calls (one at
// a time) and ReadResponseHeader and ReadResponseBody in pairs from its
// one receiving goroutine; the codec keeps the message between those two
// in fields only that goroutine touches.
type ClientCodec struct {
	s      *sock.Socket
	server netip.AddrPort

	ctx    context.Context // ends when Close is called
	cancel context.CancelFunc
	closed atomic.Bool
	once   sync.Once
	err    error // from closing the socket

	// failed is the error that ended the codec when an RPC to the
	// server failed; WriteRequest returns it from then on.
	failed atomic.Pointer[unavailableError]

	cfg Config
	enc encoders

	// Large calls in progress (see client_large.go), by sequence number.
	largeMu sync.Mutex
	large   map[uint64]*largeCall
	nlarge  atomic.Int32 // len(large), read without the lock

	// The reading goroutine's own: its decoders, and the response
	// between ReadResponseHeader and ReadResponseBody: its message and
	// the length of its header, which the body follows.
	dec      decoders
	in       inbound
	hdr      int
	haveBody bool

	dropped atomic.Uint64
}

var _ rpc.ClientCodec = (*ClientCodec)(nil)

// NewClientCodec returns a codec that calls the server at server from
// the client socket s, which it owns from now on.
func NewClientCodec(s *sock.Socket, server netip.AddrPort) *ClientCodec {
	return NewClientCodecConfig(s, server, nil)
}

// NewClientCodecConfig is NewClientCodec configured by cfg (nil for
// defaults).
func NewClientCodecConfig(s *sock.Socket, server netip.AddrPort, cfg *Config) *ClientCodec {
	ctx, cancel := context.WithCancel(context.Background())
	return &ClientCodec{s: s, server: server, ctx: ctx, cancel: cancel, cfg: cfg.withDefaults(), large: make(map[uint64]*largeCall)}
}

// NewClient returns an rpc.Client whose calls go to the server at server
// from the client socket s, which it owns from now on.
func NewClient(s *sock.Socket, server netip.AddrPort) *rpc.Client {
	return rpc.NewClientWithCodec(NewClientCodec(s, server))
}

// Dial opens a client socket (port 0) on the unspecified address of
// server's family, configured by cfg (nil for defaults), and returns an
// rpc.Client calling server from it. Homa has no connections: nothing is
// sent until the first call, so an absent server shows up as that call's
// error (ErrServerUnavailable).
func Dial(server netip.AddrPort, cfg *sock.Config) (*rpc.Client, error) {
	return DialConfig(server, cfg, nil)
}

// DialConfig is Dial with the client configured by ncfg (nil for
// defaults).
func DialConfig(server netip.AddrPort, cfg *sock.Config, ncfg *Config) (*rpc.Client, error) {
	if !server.Addr().IsValid() || server.Port() == 0 {
		return nil, fmt.Errorf("netrpc: dial %v: %w", server, sock.ErrBadAddress)
	}
	local := netip.IPv4Unspecified()
	if server.Addr().Is6() && !server.Addr().Is4In6() {
		local = netip.IPv6Unspecified()
	}
	s, err := sock.Open(netip.AddrPortFrom(local, 0), cfg)
	if err != nil {
		return nil, fmt.Errorf("netrpc: dial %v: %w", server, err)
	}
	return rpc.NewClientWithCodec(NewClientCodecConfig(s, server, ncfg)), nil
}

// WriteRequest sends the call as a new Homa RPC whose completion cookie
// is the call's sequence number. Errors from the socket (for example
// sock.ErrMessageTooLong) are wrapped and become the call's error.
func (c *ClientCodec) WriteRequest(r *rpc.Request, body any) error {
	if f := c.failed.Load(); f != nil {
		return f
	}
	out := newOutMsg(c.cfg.MaxMessage)
	defer out.release()
	b, err := appendRequest(out.head.AvailableBuffer(), r.ServiceMethod)
	if err != nil {
		return err
	}
	out.Write(b)
	if err := c.enc.encode(out, body); err != nil {
		return fmt.Errorf("netrpc: encode %s arguments: %w", r.ServiceMethod, err)
	}
	if out.tooLong() {
		return tooLong(r.ServiceMethod+" request", out.n, c.cfg.MaxMessage, "client")
	}
	if out.parts != nil {
		err = c.sendLarge(r.Seq, out.parts, out.n)
	} else {
		_, err = c.s.Send(c.server, out.head.Bytes(), r.Seq)
	}
	if err != nil {
		return fmt.Errorf("netrpc: call %s on %v: %w", r.ServiceMethod, c.server, err)
	}
	return nil
}

// ReadResponseHeader waits for the next response. A malformed response
// fails its call alone, with an error string. A failed Homa RPC (the
// server is absent or stopped answering) ends the codec: it closes the
// socket and returns an error matching ErrServerUnavailable and the
// transport's cause, which rpc.Client gives to every call in progress
// before it shuts down, as it does when a TCP connection breaks: a
// later call returns rpc.ErrShutdown, and the caller dials again. After
// Close it returns io.EOF.
func (c *ClientCodec) ReadResponseHeader(r *rpc.Response) error {
	for {
		m, err := c.s.Recv(c.ctx, sock.Any)
		if err != nil {
			if c.closed.Load() {
				return io.EOF
			}
			return fmt.Errorf("netrpc: receive from %v: %w", c.server, err)
		}
		if m.IsRequest() {
			// A server socket was given to a client codec; nobody will
			// answer this request here.
			c.dropped.Add(1)
			m.Release()
			continue
		}
		if m.Err != nil {
			return c.fail(m.Err)
		}
		r.Seq = m.Cookie
		if len(m.Data) > c.cfg.MaxMessage { // only when set below homaMax
			c.dropped.Add(1)
			m.Release()
			r.Error = tooLong("reply", len(m.Data), c.cfg.MaxMessage, "client").Error()
			return nil
		}
		in := wholeMessage(m)
		if c.nlarge.Load() > 0 || kindOf(m.Data) != kindResponse {
			var err error
			var deliver bool
			in, deliver, err = c.takeLarge(m)
			if !deliver {
				continue
			}
			if err != nil {
				c.dropped.Add(1)
				r.Error = err.Error()
				return nil
			}
		}
		method, errMsg, body, err := parseResponse(in.first)
		if err != nil && in.rest != nil {
			in.join() // a header longer than the first part
			method, errMsg, body, err = parseResponse(in.first)
		}
		if err != nil {
			c.dropped.Add(1)
			in.free()
			r.Error = err.Error()
			return nil
		}
		r.ServiceMethod = string(method)
		if len(errMsg) > 0 {
			r.Error = string(errMsg)
		}
		c.in, c.hdr, c.haveBody = in, len(in.first)-len(body), true
		return nil
	}
}

// ReadResponseBody decodes the reply of the response just read into
// body, or discards it when body is nil.
func (c *ClientCodec) ReadResponseBody(body any) error {
	in, hdr, ok := c.in, c.hdr, c.haveBody
	c.in, c.hdr, c.haveBody = inbound{}, 0, false
	if !ok {
		return nil // a malformed response: its header carried the error
	}
	defer in.free()
	if body == nil {
		return nil
	}
	if err := in.decodeBody(&c.dec, hdr, body); err != nil {
		return fmt.Errorf("netrpc: decode reply: %w", err)
	}
	return nil
}

// fail ends the codec after an RPC to the server failed with cause.
func (c *ClientCodec) fail(cause error) error {
	e := &unavailableError{server: c.server, cause: cause}
	if !c.failed.CompareAndSwap(nil, e) {
		e = c.failed.Load()
	}
	c.Close()
	return e
}

// ErrServerUnavailable matches the error of every call in progress when
// a Homa RPC to the server fails, over every transport and backend: no
// socket listens on the server's port (sock.ErrNoListener: reported at
// once over UDP, and by hosts with the Linux module), the server stopped
// answering or its host has no Homa (sock.ErrPeerTimeout, after
// sock.Config.PeerTimeout), or the network reported the host
// unreachable (sock.ErrHostUnreachable). The error matches that cause
// too, and names the server. The rpc.Client is then shut down, as after
// a broken TCP connection: dial again to call the server once it is
// back.
var ErrServerUnavailable = errors.New("netrpc: server unavailable")

// unavailableError is the error that ends a client codec.
type unavailableError struct {
	server netip.AddrPort
	cause  error // the failed RPC's *sock.OpError
}

func (e *unavailableError) Error() string {
	cause := e.cause
	var oe *sock.OpError
	if errors.As(cause, &oe) {
		cause = oe.Err // the RPC's id and peer add nothing here
	}
	return fmt.Sprintf("netrpc: server %v unavailable: %v (the client is shut down; dial again)", e.server, cause)
}

func (e *unavailableError) Unwrap() []error { return []error{ErrServerUnavailable, e.cause} }

// Close ends the codec: a ReadResponseHeader in progress returns io.EOF
// and the socket is closed. Close is idempotent.
func (c *ClientCodec) Close() error {
	c.once.Do(func() {
		c.closed.Store(true)
		c.cancel()
		c.err = c.s.Close()
	})
	return c.err
}

// Dropped counts messages the codec discarded: malformed responses
// (whose calls fail) and requests arriving at its socket.
func (c *ClientCodec) Dropped() uint64 { return c.dropped.Load() }
